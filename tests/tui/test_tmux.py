"""`appliance tui` in a real terminal (tmux at 80×24) against a store that another process updates:
the stand-in for the headless appliance moves from synthesize to validate and answers a pause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.store import Store

VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    socket = str(tmp_path / "tmux.sock")  # a private server whose socket goes away with tmp_path

    def run(*args: str) -> str:
        return subprocess.run(["tmux", "-S", socket, *args], capture_output=True, text=True, check=True).stdout

    yield run
    subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)


def wait_for(what: Callable[[], str], pattern: str, *, timeout_s: float = 60.0) -> str:
    """Poll until the pane matches; the deadline only bounds a hang, nothing is timed."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = what()
        if re.search(pattern, text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {pattern!r}; the pane shows:\n{text}")
        time.sleep(0.2)


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
