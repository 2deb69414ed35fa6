"""`appliance tui` in a real terminal (tmux at 80×24) against a store that another process updates:
the stand-in for the headless appliance moves from synthesize to validate and answers a pause, then
evaluates: its held-out rollouts show while they run, and the curves screen charts the result."""

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
        [sys.executable, str(Path(__file__).parent / "fake_appliance.py"), str(settings.db_path), "live", str(go)],
        env=env)
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


def test_tui_shows_a_live_evaluation_and_then_its_chart(tmp_path: Path, settings, tmux) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "APPLIANCE_HOME": str(settings.home)}
    writer = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "fake_appliance.py"), str(settings.db_path), "live", str(go)],
        env=env)
    try:
        store = Store(settings.db_path)
        wait_for(lambda: "yes" if store.latest_run() else "", "yes")
        tmux("new-session", "-d", "-s", "eval", "-x", "80", "-y", "24",
             f"TERM=xterm-256color COLORTERM= APPLIANCE_HOME={settings.home} {VENV_BIN}/appliance tui --refresh 0.2")

        def pane() -> str:
            return tmux("capture-pane", "-p", "-t", "eval")

        wait_for(pane, r"overview · run live")
        go.touch()
        go.with_name("evaluate").touch()  # one held-out rollout finished, one still running
        tmux("send-keys", "-t", "eval", "3")
        shown = wait_for(pane, r"held-out evaluation · 2 tasks · 1/2 rollouts done, 1 running")
        assert re.search(r"h0\s+files/1\s+1\s+0\s+1\s+1\s+0\s+1\.00", shown), shown
        assert re.search(r"h0\.eval0\s+bash-agent\s+finished\s+success\s+1\.00", shown), shown
        go.with_name("evaluated").touch()  # the last one fails: 1 of 2 passed
        tmux("send-keys", "-t", "eval", "6")
        chart = wait_for(pane, r"latest iteration 0: 50\.0% \[9\.5%, 90\.5%\] \(1/2\)")
        lines = chart.splitlines()
        axis = [i for i, line in enumerate(lines) if re.match(r"\s*(100|50|0)% ┤", line)]
        assert len(axis) == 3, chart  # the 100 %, 50 % and 0 % rows of the chart, in an 80x24 pane
        assert lines[axis[1]].rstrip().endswith("●"), chart  # the point on the 50 % row
        assert "│" in lines[axis[0] + 1] and "│" in lines[axis[2] - 1], chart  # its interval bar, 9.5-90.5 %
        assert re.search(r"L2\s+0\.00 → 0\.00", chart), chart
        tmux("send-keys", "-t", "eval", "q")
    finally:
        writer.terminate()
        writer.wait(timeout=10)


CHATTY_RUN = """
import os, sys, threading, time
import click
from appliance.config import load_settings
from appliance.tui import run_tui

def chatter():  # the run's threads: a log line, a print, a child or native library writing to fd 2
    for i in range(10_000):
        click.echo(f"log line {i}", err=True)
        print(f"printed {i}")
        os.write(2, f"raw fd2 {i}\\n".encode())
        time.sleep(0.05)

threading.Thread(target=chatter, daemon=True).start()
run_tui(load_settings(), detach=True, refresh_s=0.2)
os.write(2, b"fd2 is the terminal again\\n")
"""


def test_the_run_window_keeps_the_run_output_off_the_screen(tmp_path: Path, settings, tmux) -> None:
    """`appliance run`'s own TUI: what the run writes meanwhile goes to logs/run-output.log, not over the
    picture; q detaches and the terminal is the run's again."""
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY_RUN)
    tmux("new-session", "-d", "-s", "run", "-x", "80", "-y", "24",
         f"TERM=xterm-256color COLORTERM= APPLIANCE_HOME={settings.home} {sys.executable} {script}; sleep 600")

    def pane() -> str:
        return tmux("capture-pane", "-p", "-t", "run")

    shown = wait_for(pane, r"overview · no run yet[\s\S]*q Detach")
    shown = wait_for(pane, r"engine STOPPED")  # a few refreshes while the thread writes
    assert not re.search(r"log line|printed|raw fd2", shown), shown
    tmux("send-keys", "-t", "run", "q")
    after = wait_for(pane, r"fd2 is the terminal again")
    unwrapped = after.replace("\n", "")  # the path wraps at 80 columns
    assert re.search(r"what the run wrote while the TUI was open is in \S+run-output\.log", unwrapped), after
    log = (settings.home / "logs" / "run-output.log").read_text()
    assert "raw fd2 " in log and "log line " in log and "printed " in log
