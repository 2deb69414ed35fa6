"""A command that starts the engine (rollout, eval, serve) stops it when it is sent SIGTERM: the engine runs
in its own process group, so a command that died of the signal left it serving (seen with `appliance eval`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import subprocess, sys, time
from appliance.cli.base import sigterm_stops_cleanly
with sigterm_stops_cleanly():
    engine = subprocess.Popen(["sleep", "300"], start_new_session=True)  # as the engine: its own group
    try:
        print(engine.pid, flush=True)
        time.sleep(300)
    finally:
        engine.kill()
        open(sys.argv[1], "w").write("stopped")
"""


def test_sigterm_runs_the_commands_teardown(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout
    engine_pid = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert marker.read_text() == "stopped"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{engine_pid}").exists():
        time.sleep(0.1)  # killed, then reaped by init once its parent is gone
    assert not Path(f"/proc/{engine_pid}").exists() or "Z" in Path(f"/proc/{engine_pid}/stat").read_text().split()[2]


def test_the_commands_that_start_the_engine_stop_it_on_sigterm() -> None:
    import inspect

    from appliance.cli import debug
    from appliance.cli import eval as eval_cli

    for command in (debug.rollout, debug.serve, eval_cli.eval_):
        assert "sigterm_stops_cleanly()" in inspect.getsource(command.callback), command.name
