"""Fault: two `appliance` processes on one data directory. The second `appliance run` is refused with the
first's pid before it starts anything (engine, proxy, sandbox sweep); never two loops on one store. The
lock dies with its holder, kill -9 included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.errors import LoopLocked
from appliance.store import Store

WORKTREE = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from appliance.store import Store
with Store(sys.argv[1]).loop_lock():
    print("held", flush=True)
    time.sleep(600)
"""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    return env | {"APPLIANCE_HOME": str(home)}


def _holder(settings: Settings) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(settings.db_path)], cwd=WORKTREE, text=True,
                            stdout=subprocess.PIPE, env=_env(settings.home))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_appliance_run_is_refused_with_the_first_pid(settings: Settings, store: Store) -> None:
    first = _holder(settings)
    try:
        t0 = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "appliance.cli", "run", "--headless", "--iterations", "1"],
                                cwd=WORKTREE, env=_env(settings.home), capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stderr
        assert f"another appliance process (pid {first.pid}) is running the loop on {settings.db_path}" in second.stderr
        assert f"kill {first.pid}" in second.stderr and "Traceback" not in second.stderr
        assert "starting the engine" not in second.stderr  # refused before anything started
        assert time.monotonic() - t0 < 60
        assert store.latest_run() is None  # the refused process made no run
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the holder died by kill -9: its pid is still in the file, the lock is not
    assert Path(f"{settings.db_path}.loop-lock").read_text().strip() == str(first.pid)
    with store.loop_lock():
        assert Path(f"{settings.db_path}.loop-lock").read_text().strip() == str(os.getpid())


def test_the_lock_is_one_per_store_in_one_process_too(settings: Settings, store: Store, tmp_path: Path) -> None:
    other = Store(tmp_path / "other" / "appliance.db")
    with store.loop_lock(), other.loop_lock():  # two data directories: two loops are fine
        with pytest.raises(LoopLocked, match=f"pid {os.getpid()}"):
            with Store(settings.db_path).loop_lock():
                pass
    with store.loop_lock():  # released on the way out
        pass
    other.close()
