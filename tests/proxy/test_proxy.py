"""The proxy in front of the tiny-model engine, driven by the official SDKs with only a base URL.

Each test checks what the harness got AND what was recorded: prompt ids equal the engine's own
/tokenize of the request the engine saw, completion ids and logprobs line up, errors are rows.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import TYPE_CHECKING

import anthropic
import httpx
import openai
import pytest

from appliance.config import load_settings
from appliance.proxy import ProxyServer, create_app
from appliance.schemas import EngineState, ModelCall, Outcome
from appliance.serving import Engine

if TYPE_CHECKING:
    from proxy.conftest import Route  # tests/proxy/conftest.py (the `route` fixture's type)

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
TOOL_HISTORY = [
    {"role": "user", "content": "How many files are here?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls | wc -l"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3"},
]


def tokenize(engine: Engine, **body) -> list[int]:
    r = httpx.post(f"{engine.base_url}/tokenize", json={"model": engine.settings.engine.served_model_name, **body})
    r.raise_for_status()
    return r.json()["tokens"]


def detokenize(engine: Engine, ids: list[int]) -> str:
    r = httpx.post(f"{engine.base_url}/detokenize", json={"model": engine.settings.engine.served_model_name,
                                                         "tokens": ids})
    r.raise_for_status()
    return r.json()["prompt"]


def only_call(route: Route) -> ModelCall:
    calls = route.store.model_calls(route.rollout_id)
    assert len(calls) == 1, calls
    return calls[0]


def assert_exact(call: ModelCall, engine: Engine) -> None:
    assert call.status == "ok", call.error
    req = call.request
    if "messages" in req:
        expected = tokenize(engine, messages=req["messages"], **({"tools": req["tools"]} if req.get("tools") else {}))
    else:
        expected = tokenize(engine, prompt=req["prompt"])
    assert call.prompt_ids == expected
    assert len(call.completion_ids) == len(call.logprobs) > 0
    assert all(lp <= 0.0 for lp in call.logprobs)
    assert call.policy_version == engine.policy_version
    assert req["model"] == engine.model_name() and req["return_token_ids"] is True


def oai(route: Route) -> openai.OpenAI:
    return openai.OpenAI(base_url=route.openai_base, api_key="unused")


def test_openai_chat_non_streaming(route: Route, engine: Engine) -> None:
    resp = oai(route).chat.completions.create(model="whatever-the-harness-says", messages=MESSAGES, max_tokens=8)
    assert isinstance(resp.choices[0].message.content, str)
    assert resp.choices[0].logprobs is None  # not asked for: stripped
    assert "prompt_token_ids" not in (resp.model_extra or {})
    call = only_call(route)
    assert_exact(call, engine)
    assert len(call.completion_ids) == resp.usage.completion_tokens
    assert call.response["choices"][0]["message"]["content"] == resp.choices[0].message.content
    assert call.temperature == 1.0  # none asked: the engine's default (--generation-config vllm)


def test_the_sampling_temperature_is_recorded_with_the_call(route: Route, engine: Engine) -> None:
    oai(route).chat.completions.create(model="x", messages=MESSAGES, max_tokens=4, temperature=0.7)
    call = only_call(route)
    assert_exact(call, engine)
    assert call.temperature == 0.7


def test_openai_chat_streaming(route: Route, engine: Engine) -> None:
    stream = oai(route).chat.completions.create(model="x", messages=MESSAGES, max_tokens=8, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert all("token_ids" not in (c.choices[0].model_extra or {}) for c in chunks if c.choices)
    call = only_call(route)
    assert_exact(call, engine)
    assert call.response["text"] == text


def test_harness_that_asks_for_ids_and_logprobs_gets_them(route: Route, engine: Engine) -> None:
    resp = oai(route).chat.completions.create(model="x", messages=MESSAGES, max_tokens=4, logprobs=True,
                                              extra_body={"return_token_ids": True})
    call = only_call(route)
    assert resp.model_extra["prompt_token_ids"] == call.prompt_ids
    assert [c.logprob for c in resp.choices[0].logprobs.content] == pytest.approx(call.logprobs, abs=1e-6)


def test_openai_completions_both_ways(route: Route, engine: Engine) -> None:
    client = oai(route)
    resp = client.completions.create(model="x", prompt="Once upon a time", max_tokens=6)
    assert isinstance(resp.choices[0].text, str)
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="x", prompt="Once upon a time", max_tokens=6, stream=True) if c.choices)
    calls = route.store.model_calls(route.rollout_id)
    assert [c.seq for c in calls] == [0, 1]
    for call in calls:
        assert_exact(call, engine)
    assert calls[1].response["text"] == text


def test_models_lists_the_served_name(route: Route) -> None:
    assert [m.id for m in oai(route).models.list()] == ["policy"]


def test_tool_call_round_trip_is_recorded_exactly(route: Route, engine: Engine) -> None:
    resp = oai(route).chat.completions.create(model="x", messages=TOOL_HISTORY, tools=TOOLS, max_tokens=8)
    assert resp.choices[0].finish_reason in ("stop", "length", "tool_calls")
    call = only_call(route)
    assert_exact(call, engine)
    assert [m["role"] for m in call.request["messages"]] == ["user", "assistant", "tool"]
    prompt = detokenize(engine, call.prompt_ids)
    assert '<tool_call>[{"name": "bash", "arguments": {"cmd": "ls | wc -l"}}]</tool_call>' in prompt
    assert "<tool_response>\n3\n</tool_response>" in prompt
    assert '"name": "bash"' in prompt.split("<tools>")[1]  # the tool list reached the template


def test_anthropic_messages_non_streaming_and_streaming(route: Route, engine: Engine) -> None:
    client = anthropic.Anthropic(base_url=route.base, api_key="unused")
    msg = client.messages.create(model="claude-any", max_tokens=8, system="You are terse.",
                                 messages=[{"role": "user", "content": "Say hi."}])
    assert msg.role == "assistant" and msg.content[0].type == "text"
    with client.messages.stream(model="claude-any", max_tokens=8,
                                messages=[{"role": "user", "content": "Say hi."}]) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].type == "text"
    calls = route.store.model_calls(route.rollout_id)
    assert len(calls) == 2
    for call in calls:
        assert_exact(call, engine)
    assert calls[0].response["content"][0]["text"] == msg.content[0].text
    assert calls[0].request["messages"][0] == {"role": "system", "content": "You are terse."}
    assert len(calls[1].completion_ids) == streamed.usage.output_tokens


def test_anthropic_tool_round_trip(route: Route, engine: Engine) -> None:
    client = anthropic.Anthropic(base_url=route.base, api_key="unused")
    client.messages.create(
        model="claude-any", max_tokens=8,
        tools=[{"name": "bash", "description": "Run a shell command.",
                "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
        messages=[{"role": "user", "content": "How many files?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash",
                                                     "input": {"cmd": "ls | wc -l"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"}]}])
    call = only_call(route)
    assert_exact(call, engine)
    assert [m["role"] for m in call.request["messages"]] == ["user", "assistant", "tool"]
    assert "<tool_response>\n3\n</tool_response>" in detokenize(engine, call.prompt_ids)


def test_wrong_or_finished_token_is_refused(route: Route, proxy: ProxyServer, make_route) -> None:
    bad = openai.OpenAI(base_url=f"{proxy.url}/r/not-a-token/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="x", messages=MESSAGES, max_tokens=2)
    other = make_route(route.store, proxy.url)
    oai(other).chat.completions.create(model="x", messages=MESSAGES, max_tokens=2)
    route.store.finish_rollout(other.rollout_id, Outcome.SUCCESS, 1.0)
    with pytest.raises(openai.APIStatusError) as gone:
        openai.OpenAI(base_url=other.openai_base, api_key="u", max_retries=0).chat.completions.create(
            model="x", messages=MESSAGES, max_tokens=2)
    assert gone.value.status_code == 410
    assert route.store.model_calls(route.rollout_id) == []  # another rollout's calls never land here
    assert len(route.store.model_calls(other.rollout_id)) == 1


def test_malformed_and_oversized_requests_are_clear_errors_and_rows(route: Route, engine: Engine) -> None:
    url = f"{route.openai_base}/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    big = json.dumps({"model": "x", "messages": [{"role": "user", "content": "a" * 3_000_000}]})
    r = httpx.post(url, content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "max_request_bytes" in r.json()["error"]["message"]
    r = httpx.post(url, json={"model": "x", "messages": MESSAGES, "n": 2})
    assert r.status_code == 400
    r = httpx.post(url, json={"model": "x", "messages": "not a list"})
    assert r.status_code == 400  # the engine's own validation message, passed through
    calls = route.store.model_calls(route.rollout_id)
    assert [c.status for c in calls] == ["error"] * 4
    assert all(c.error for c in calls)


def test_limits_cap_max_tokens_and_concurrency(engine: Engine, tmp_path, make_route) -> None:
    limited = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PROXY__MAX_TOKENS": "3",
                                     "APPLIANCE_PROXY__MAX_CONCURRENCY_PER_ROLLOUT": "1"})
    with ProxyServer(create_app(engine.store, engine, limited), limited, port=0) as server:
        route = make_route(engine.store, server.url)
        body = {"model": "x", "messages": MESSAGES, "max_tokens": 500, "stream": True,
                "ignore_eos": True}
        with httpx.Client(timeout=60) as client:
            with client.stream("POST", f"{route.openai_base}/chat/completions", json=body) as first:
                second = client.post(f"{route.openai_base}/chat/completions", json=body)
                assert second.status_code == 429 and second.headers["retry-after"] == "1"
                first.read()
        call = only_call(route)
        assert call.request["max_tokens"] == 3 and len(call.completion_ids) == 3


def test_not_serving_gives_503_with_retry_after(route: Route, engine: Engine) -> None:
    engine.pause_for_training()
    try:
        r = httpx.post(f"{route.openai_base}/chat/completions", json={"model": "x", "messages": MESSAGES})
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
    finally:
        engine.resume()
    assert route.store.model_calls(route.rollout_id) == []  # a retry signal, not a model call


def wait_for_calls(route: Route, n: int, timeout_s: float = 20) -> list[ModelCall]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        calls = route.store.model_calls(route.rollout_id)
        if len(calls) >= n:
            return calls
        time.sleep(0.1)
    raise AssertionError(f"expected {n} recorded calls, found {len(route.store.model_calls(route.rollout_id))}")


def long_stream(route: Route, client: httpx.Client):
    body = {"model": "x", "messages": MESSAGES, "max_tokens": 1000, "ignore_eos": True, "stream": True}
    return client.stream("POST", f"{route.openai_base}/chat/completions", json=body)


def test_harness_disconnecting_mid_stream_leaves_an_error_row(route: Route, engine: Engine) -> None:
    with httpx.Client(timeout=60) as client, long_stream(route, client) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
    call = wait_for_calls(route, 1)[0]
    # a loaded machine can stall this thread until the engine has finished: then the row is whole and ok
    # (tests/proxy/test_hangup.py makes each outcome certain against an engine stand-in)
    assert "disconnected" in call.error if call.status == "error" else len(call.completion_ids) == 1000
    assert len(call.completion_ids) == len(call.logprobs)
    assert call.prompt_ids  # the first chunk carried them


def test_engine_killed_mid_request_is_an_infra_error_and_the_engine_comes_back(route: Route, engine: Engine) -> None:
    # Last in this module: the engine restarts (~35 s) and later tests need it serving.
    with httpx.Client(timeout=120) as client, long_stream(route, client) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        os.killpg(engine.pid, signal.SIGKILL)
        rest = "\n".join(lines)
    assert "engine_error" in rest and "[DONE]" not in rest
    call = wait_for_calls(route, 1)[0]
    assert call.status == "error" and "engine failed" in call.error
    deadline = time.monotonic() + 60  # the supervisor notices within a few seconds
    while not any("died" in e.message for e in engine.store.events(kind="error")):
        assert time.monotonic() < deadline, "the engine's death was never recorded"
        time.sleep(0.5)
    assert engine.wait_serving(engine.settings.engine.startup_timeout_s)
    resp = oai(route).chat.completions.create(model="x", messages=MESSAGES, max_tokens=4)
    assert resp.choices[0].message.content is not None
    assert route.store.model_calls(route.rollout_id)[-1].status == "ok"
    assert engine.state == EngineState.SERVING
