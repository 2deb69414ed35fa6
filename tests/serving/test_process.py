import subprocess
from pathlib import Path

import httpx
import pytest

from appliance.config import Settings
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


@pytest.mark.parametrize("answer, why", [
    (httpx.ReadTimeout("no token"), "the engine generated nothing for 7 s (hung; its /health still answered)"),
    (httpx.Response(500), "the engine's probe generation failed (500)"),
    (httpx.Response(200, json={"choices": [{"text": "a"}]}), None),
    (httpx.ConnectError("refused"), None),  # unreachable: the death and /health checks decide that
])
def test_the_probe_names_a_hung_core_and_leaves_the_rest_to_the_other_checks(settings: Settings, answer,
                                                                            why) -> None:
    """The supervisor's probe: /health only reads a flag, so a one-token generation that times out is a hang
    (tests/faults/test_engine_faults.py's chaos case stops a real core)."""
    def reply(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        assert request.extensions["timeout"]["read"] == 7.0
        if isinstance(answer, Exception):
            raise answer
        return answer

    hung = settings.model_copy(update={"engine": settings.engine.model_copy(update={"hang_timeout_s": 7.0})})
    with httpx.Client(transport=httpx.MockTransport(reply), base_url="http://engine") as http:
        assert process.probe(http, hung, [1]) == why
