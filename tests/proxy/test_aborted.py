"""A call the engine aborted (vLLM's /sleep cuts off what a drain left in flight; its answer ends with
finish_reason "abort") is the machine's doing: an error row that makes its rollout an infra error, never a
normal turn in the gradient (issue 46, item 5)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from appliance.practice import engine_failed
from appliance.proxy import register_route
from appliance.schemas import ModelCall, Rollout, RolloutStatus
from appliance.store import Store
from appliance.testing.instant_engine import instant_engine_app
from proxy.test_hangup import proxy_before  # tests/proxy/test_hangup.py

BODY = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def one_call(store: Store, proxy_url: str, *, stream: bool) -> tuple[httpx.Response, str, ModelCall]:
    rollout_id = f"abort-{uuid.uuid4().hex[:8]}"
    store.add_rollout(Rollout(rollout_id, None, None, None, None, "test", 0, RolloutStatus.RUNNING, purpose="debug"))
    url = f"{proxy_url}/r/{register_route(store, rollout_id)}/v1/chat/completions"
    r = httpx.post(url, json={**BODY, "stream": stream}, timeout=30)
    (call,) = store.model_calls(rollout_id)
    return r, r.text, call


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_aborted_call_is_an_engine_failure_not_a_turn(tmp_path: Path, stream: bool) -> None:
    with proxy_before(tmp_path, instant_engine_app(n_tokens=8, finish_reason="abort")) as (store, url):
        r, text, call = one_call(store, url, stream=stream)
    assert call.status == "error" and "aborted" in call.error, call
    assert engine_failed(call)  # the rollout becomes an infra error: out of the gradient
    assert len(call.completion_ids) == len(call.logprobs) == 8  # what came back is kept, for the record
    assert (r.status_code == 502) if not stream else ('"engine_error"' in text and "aborted" in text)


def test_a_finished_call_stays_a_turn(tmp_path: Path) -> None:
    with proxy_before(tmp_path, instant_engine_app(n_tokens=8, finish_reason="stop")) as (store, url):
        for stream in (False, True):
            _, _, call = one_call(store, url, stream=stream)
            assert call.status == "ok" and not engine_failed(call)
