"""scripts/tui_snapshot.py: the overview of a recorded run, printed as text by the real app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from appliance.store import Store
from recorded_run import record_run  # tests/recorded_run.py

REPO = Path(__file__).resolve().parents[2]


def test_the_overview_of_a_store_prints_as_text(tmp_path: Path) -> None:
    store = Store(tmp_path / "appliance.db")
    record_run(store)
    store.close()
    out = subprocess.run([sys.executable, str(REPO / "scripts/tui_snapshot.py"), "--home", str(tmp_path),
                          "--svg", str(tmp_path / "overview.svg")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "held-out pass@1" in out.stdout and "last step" in out.stdout and "rollouts" in out.stdout
    assert (tmp_path / "overview.svg").read_text().startswith("<svg")


def test_a_home_without_a_store_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts/tui_snapshot.py"), "--home", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "no store at" in out.stderr
