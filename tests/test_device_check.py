"""scripts/device_check, the prepared first minutes on a GPU machine, end to end on the CPU (--dry: tiny
shapes, the multi-process path over gloo), so that device time is spent on figures, not on fixing it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dry_run_gives_a_verdict_per_check(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts/device_check"), "--dry", "--json-out", str(out)],
                          capture_output=True, text=True, timeout=840, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdicts = [line.split()[1:3] for line in proc.stdout.splitlines() if line.startswith("VERDICT ")]
    assert verdicts == [["train-full", "PASS:"], ["train-lora", "PASS:"], ["memory", "PASS:"],
                        ["canary", "PASS:"], ["multi", "PASS:"]], proc.stdout
    figures = json.loads(out.read_text())
    modes = {r["mode"]: r for r in figures["train"]["results"]}
    assert set(modes) == {"full", "lora", "plain"} and all(r["loss_finite"] for r in modes.values())
    assert modes["lora"]["trainable_params"] < modes["full"]["trainable_params"]
    assert all(r["value_head"] and r["gradient_checkpointing"] for r in figures["memory"]["results"])
    assert figures["canary"]["tolerance"] == 0.3 and figures["canary"]["max_abs_delta"] < 0.3
    assert figures["multi"]["processes"] == 2
