"""Infra errors by cause (issue 15): the machine's failures are infra_error, the agent's are failures."""

from __future__ import annotations

import pytest

from appliance.harness.base import EndReason
from appliance.practice import _Infra, engine_failed, external_episode
from appliance.schemas import ModelCall


def row(status: str, error: str | None) -> ModelCall:
    return ModelCall(None, "r", 0, status, {}, None, [1], [], [], 0, 0.1, error)


def test_a_harness_that_exits_non_zero_after_a_model_call_is_infra():
    with pytest.raises(_Infra, match="harness exited 2 after 1 model call"):
        external_episode(2, False, 1, "Traceback ...\nKeyError")
    with pytest.raises(_Infra, match="after 0 model call"):
        external_episode(1, False, 0, "")
    assert external_episode(0, False, 3, "").end_reason == EndReason.SUBMITTED
    assert external_episode(2, True, 3, "").end_reason == EndReason.TIME_LIMIT  # the agent's time ran out


def test_engine_failures_are_told_from_the_requests_fault():
    assert engine_failed(row("error", "engine unreachable: ConnectError()"))
    assert engine_failed(row("error", "engine answered 500: internal error"))
    assert engine_failed(row("error", "engine failed mid-stream: EngineStreamError('closed')"))
    assert not engine_failed(row("error", "engine answered 400: context length exceeded"))  # the agent's
    assert not engine_failed(row("error", "request body is not valid JSON: ..."))
    assert not engine_failed(row("error", "the harness disconnected mid-stream"))
    assert not engine_failed(row("ok", None))
