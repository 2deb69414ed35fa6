"""`appliance tui` in a real terminal (tmux at 80×24) against a store that another process updates:
the stand-in for the headless appliance moves from synthesize to validate and answers a pause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from appliance.store import Store
from tmux_pane import wait_for  # tests/tui/tmux_pane.py

VENV_BIN = Path(sys.executable).parent


def test_tui_follows_a_live_appliance(tmp_path: Path, settings, tmux) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "APPLIANCE_HOME": str(settings.home)}
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys; from appliance.testing import run_fake_appliance; "
         "run_fake_appliance(sys.argv[1], 'live', sys.argv[2])", str(settings.db_path), str(go)], env=env)
    try:
        store = Store(settings.db_path)
        wait_for(lambda: "yes" if store.latest_run() else "", "yes")
        tmux("new-session", "-d", "-s", "tui", "-x", "80", "-y", "24",
             # a 256-colour terminal, as most SSH sessions announce themselves
             f"TERM=xterm-256color COLORTERM= APPLIANCE_HOME={settings.home} {VENV_BIN}/appliance tui --refresh 0.2")

        def pane() -> str:
            return tmux("capture-pane", "-p", "-t", "tui")

        # a phase that has started shows its duration ("validate 3s"); one still to come shows its name only
        before = wait_for(pane, r"overview · run live · RUNNING[\s\S]*synthesize \d+s")
        assert not re.search(r"validate \d", before)
        go.touch()  # the appliance moves on to its next phase
        wait_for(pane, r"synthesize \d+s ›\s+validate \d")

        tmux("send-keys", "-t", "tui", "5")
        wait_for(pane, r"the loop reports:\s+RUNNING")
        tmux("send-keys", "-t", "tui", "p")
        wait_for(pane, r"Pause\?")
        tmux("send-keys", "-t", "tui", "y")
        wait_for(pane, r"the loop reports:\s+PAUSED")
        assert str(store.get_run("live").status) == "paused"
        tmux("send-keys", "-t", "tui", "q")
    finally:
        writer.terminate()
        writer.wait(timeout=10)
