import subprocess
from pathlib import Path

import pytest

from appliance.serving import process


def test_a_start_that_goes_quiet_is_a_stall_and_the_process_is_killed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "STALL_S", 1.0)
    log = tmp_path / "engine.log"
    log.write_text("starting\n")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with pytest.raises(process.EngineStalled, match="wrote nothing"):
        process.wait_healthy(proc, "http://127.0.0.1:9", timeout_s=30, log_path=log)
    assert proc.poll() is not None


def test_a_server_that_exits_while_starting_says_so(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    with pytest.raises(process.EngineError, match="exited with code 0"):
        process.wait_healthy(proc, "http://127.0.0.1:9", timeout_s=30, log_path=log)
