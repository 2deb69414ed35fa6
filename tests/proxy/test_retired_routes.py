"""Issue 27: a requeued rollout's old token answers 410, so a call still in flight from the interrupted
attempt can never land on the re-run."""

from __future__ import annotations

import httpx
import pytest

from appliance.proxy import ProxyServer, register_route

pytestmark = pytest.mark.slow  # the session's CPU vLLM engine behind the proxy

MESSAGES = [{"role": "user", "content": "hi"}]


def test_a_requeued_rollouts_old_token_is_gone(proxy: ProxyServer, engine, make_route) -> None:
    route = make_route(engine.store, proxy.url)
    store = route.store
    store.requeue_rollout(route.rollout_id)
    old = httpx.post(f"{route.openai_base}/chat/completions", json={"model": "x", "messages": MESSAGES,
                                                                     "max_tokens": 2}, timeout=30)
    assert old.status_code == 410, old.text
    assert store.model_calls(route.rollout_id) == []
    store.start_rollout(route.rollout_id)
    token = register_route(store, route.rollout_id)  # the re-run's own route
    fresh = httpx.post(f"{proxy.url}/r/{token}/v1/chat/completions",
                       json={"model": "x", "messages": MESSAGES, "max_tokens": 2}, timeout=60)
    assert fresh.status_code == 200, fresh.text
    again = httpx.post(f"{route.openai_base}/chat/completions", json={"model": "x", "messages": MESSAGES,
                                                                       "max_tokens": 2}, timeout=30)
    assert again.status_code == 410 and len(store.model_calls(route.rollout_id)) == 1

