"""A harness that hangs up on a stream at any moment leaves exactly one row for the call.

Against an engine stand-in that streams its whole answer at once, the hang-up often lands while the proxy
writes the finished call's row: the row must be written all the same (it was once dropped there, ~40 % of
hang-ups, and the suite's real-engine test found no row 20 s later).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from starlette.applications import Starlette

from appliance.config import load_settings
from appliance.proxy import ProxyServer, create_app, register_route
from appliance.schemas import ModelCall, Rollout, RolloutStatus
from appliance.store import Store
from appliance.testing.instant_engine import InstantEngine, instant_engine_app

BODY = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000, "stream": True}


def hang_up_after_the_first_line(store: Store, proxy_url: str) -> ModelCall:
    """One streamed call, hung up on after its first event; its one row."""
    rollout_id = f"hangup-{uuid.uuid4().hex[:8]}"
    store.add_rollout(Rollout(rollout_id, None, None, None, None, "test", 0, RolloutStatus.RUNNING, purpose="debug"))
    url = f"{proxy_url}/r/{register_route(store, rollout_id)}/v1/chat/completions"
    with httpx.Client(timeout=30) as client, client.stream("POST", url, json=BODY) as r:
        assert next(r.iter_lines()).startswith("data: ")
    deadline = time.monotonic() + 10
    while not store.model_calls(rollout_id):
        assert time.monotonic() < deadline, "a hang-up left no row for its call"
        time.sleep(0.01)
    time.sleep(0.05)  # a second row, if one were coming, would be written by now
    (call,) = store.model_calls(rollout_id)
    assert len(call.completion_ids) == len(call.logprobs)
    return call


@contextmanager
def proxy_before(tmp_path: Path, engine_app: Starlette) -> Iterator[tuple[Store, str]]:
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    store = Store(settings.db_path)
    with ProxyServer(engine_app, settings, port=0) as engine_server, \
            ProxyServer(create_app(store, InstantEngine(engine_server.url), settings), settings, port=0) as proxy:
        yield store, proxy.url
    store.close()


def test_a_hang_up_as_the_stream_ends_never_loses_the_calls_row(tmp_path: Path) -> None:
    with proxy_before(tmp_path, instant_engine_app(n_tokens=1000)) as (store, url):
        for _ in range(30):
            call = hang_up_after_the_first_line(store, url)
            # finished before the hang-up was seen (ok, whole), or cut by it
            assert (call.status == "ok" and len(call.completion_ids) == 1000) or "disconnected" in call.error


def test_a_hang_up_mid_stream_is_an_error_row_with_the_ids_so_far(tmp_path: Path) -> None:
    with proxy_before(tmp_path, instant_engine_app(n_tokens=1000, token_delay_s=0.01)) as (store, url):
        call = hang_up_after_the_first_line(store, url)
        assert call.status == "error" and "disconnected" in call.error
        assert call.prompt_ids and len(call.completion_ids) < 1000
