"""The proxy as attack surface, in front of a stand-in engine (no vLLM): what a sandbox sends cannot grow the
appliance's memory without bound, and cannot put anything but one sampled sequence into the record.

The stand-in answers like vLLM (ids, logprobs) and counts what reaches it, so "refused before the engine"
is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route as StarletteRoute

from appliance.config import Settings, load_settings
from appliance.proxy import ProxyServer, create_app
from appliance.proxy.app import RelayResponse
from appliance.schemas import EngineState
from appliance.serving.process import ENGINE_KEEPALIVE_S, environment
from appliance.store import Store
from appliance.testing.instant_engine import InstantEngine
from proxy.conftest import Route, new_route  # tests/proxy/conftest.py

MESSAGES = [{"role": "user", "content": "hi"}]
MiB = 2**20


@dataclass
class StandIn(InstantEngine):
    """ServingEngine over the stand-in app; `reply` replaces its next answers, `seen` is what reached it."""

    base_url: str = ""
    policy_version: int = 0
    state: EngineState = EngineState.SERVING
    seen: list[dict[str, Any]] = field(default_factory=list)
    reply: dict[str, Any] | None = None
    stream_reply: list[bytes] | None = None
    client_ports: list[int] = field(default_factory=list)  # the proxy's side of each call's connection


def standin_app(engine: StandIn) -> Starlette:
    async def answer(request: Request) -> Response:
        body = await request.json()
        engine.seen.append(body)
        engine.client_ports.append(request.client.port if request.client else 0)
        if body.get("stream"):
            return StreamingResponse(iter(engine.stream_reply or [b"data: [DONE]\n\n"]),
                                     media_type="text/event-stream")
        if engine.reply is not None:
            return JSONResponse(engine.reply)
        chat = "messages" in body
        return JSONResponse({"id": "x", "object": "chat.completion" if chat else "text_completion",
                             "prompt_token_ids": [1, 2, 3], "choices": [{
                                 "index": 0, "finish_reason": "length", "token_ids": [7, 8],
                                 **({"message": {"role": "assistant", "content": "ab"},
                                     "logprobs": {"content": [{"token": "a", "logprob": -0.5},
                                                              {"token": "b", "logprob": -0.25}]}} if chat else
                                    {"text": "ab", "logprobs": {"token_logprobs": [-0.5, -0.25],
                                                                "tokens": ["a", "b"]}})}]})

    return Starlette(routes=[StarletteRoute("/v1/chat/completions", answer, methods=["POST"]),
                             StarletteRoute("/v1/completions", answer, methods=["POST"])])


@dataclass
class Setup:
    engine: StandIn
    route: Route
    store: Store
    proxy: Any  # appliance.proxy.app.Proxy: its slots are what the admission test watches


@contextmanager
def serve(store: Store, settings: Settings) -> Iterator[Setup]:
    engine = StandIn()
    with ProxyServer(standin_app(engine), settings, port=0) as upstream:
        engine.base_url = upstream.url
        app = create_app(store, engine, settings)
        with ProxyServer(app, settings, port=0) as proxy:
            yield Setup(engine, new_route(store, proxy.url), store, app.state.proxy)


@pytest.fixture
def setup(store: Store, settings: Settings) -> Iterator[Setup]:
    with serve(store, settings) as s:
        yield s


def post(setup: Setup, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{setup.route.openai_base}/{path}", json=body, timeout=30)


def test_a_plain_call_still_goes_through_and_is_recorded(setup: Setup) -> None:
    r = post(setup, "chat/completions", {"model": "x", "messages": MESSAGES, "max_tokens": 2})
    assert r.status_code == 200, r.text
    (call,) = setup.store.model_calls(setup.route.rollout_id)
    assert call.status == "ok" and call.prompt_ids == [1, 2, 3] and call.completion_ids == [7, 8]
    assert call.logprobs == [-0.5, -0.25]


def test_a_connection_idle_near_the_engines_keep_alive_is_not_reused(setup: Setup) -> None:
    # vLLM closes a connection idle for ENGINE_KEEPALIVE_S; a call sent on it as it closes failed as
    # "Can not write request body" under load, so the proxy opens a fresh one after a shorter idle time
    body = {"model": "x", "messages": MESSAGES, "max_tokens": 2}
    assert post(setup, "chat/completions", body).status_code == 200
    assert post(setup, "chat/completions", body).status_code == 200
    time.sleep(ENGINE_KEEPALIVE_S - 1)
    assert post(setup, "chat/completions", body).status_code == 200
    first, soon_after, after_idle = setup.engine.client_ports
    assert soon_after == first  # pooled connections are still used while fresh
    assert after_idle != first
    assert environment(load_settings())["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == str(ENGINE_KEEPALIVE_S)


@pytest.mark.parametrize(("path", "extra", "named"), [
    ("completions", {"prompt": ["p0", "p1", "p2"]}, "prompt"),
    ("completions", {"prompt": [1, 2, 3]}, "prompt"),
    ("completions", {"prompt": [[1, 2], [3]]}, "prompt"),
    ("completions", {"prompt": "p", "echo": True, "logprobs": 1}, "echo"),
    ("completions", {"prompt": "p", "prompt_logprobs": 1}, "prompt_logprobs"),
    ("chat/completions", {"messages": MESSAGES, "prompt_logprobs": 0}, "prompt_logprobs"),
    ("chat/completions", {"messages": MESSAGES, "echo": True}, "echo"),
    ("chat/completions", {"messages": MESSAGES, "use_beam_search": True}, "use_beam_search"),
    ("completions", {"prompt": "p", "prompt_embeds": "AAAA"}, "prompt_embeds"),
    ("chat/completions", {"messages": MESSAGES, "n": True}, "n must be 1"),
    ("chat/completions", {"messages": MESSAGES, "n": 2}, "n must be 1"),
    ("completions", {"prompt": "p", "best_of": True}, "best_of must be 1"),
    ("chat/completions", {"messages": MESSAGES, "max_tokens": True}, "max_tokens"),
    ("chat/completions", {"messages": MESSAGES, "max_completion_tokens": False}, "max_completion_tokens"),
    ("completions", {"prompt": "p", "logprobs": True}, "logprobs"),
    ("chat/completions", {"messages": MESSAGES, "stream": "false"}, "stream"),
    ("chat/completions", {"messages": MESSAGES, "temperature": True}, "temperature"),
])
def test_what_is_not_one_sampled_sequence_is_refused_before_the_engine(setup: Setup, path: str,
                                                                       extra: dict[str, Any], named: str) -> None:
    r = post(setup, path, {"model": "x", **extra})
    assert r.status_code == 400, r.text
    assert named in r.json()["error"]["message"]
    assert setup.engine.seen == []  # never reached the engine
    (call,) = setup.store.model_calls(setup.route.rollout_id)
    assert call.status == "error" and named in call.error
    assert call.prompt_ids == [] and call.completion_ids == [] and call.logprobs == []


def test_anthropic_max_tokens_true_is_refused(setup: Setup) -> None:
    r = httpx.post(f"{setup.route.base}/v1/messages", json={"model": "x", "max_tokens": True, "messages": MESSAGES})
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    assert setup.engine.seen == []


@pytest.mark.parametrize("reply", [
    {"choices": [{"index": 0, "token_ids": [7], "logprobs": {"token_logprobs": [None]}, "text": "a"}]},
    {"prompt_token_ids": [1], "choices": [{"index": 0, "token_ids": [7], "text": "a",
                                           "logprobs": {"token_logprobs": [-1.0]}},
                                          {"index": 1, "token_ids": [8], "text": "b",
                                           "logprobs": {"token_logprobs": [-1.0]}}]},
    {"prompt_token_ids": [1], "choices": [{"index": 0, "token_ids": [7, 8], "text": "ab",
                                           "logprobs": {"token_logprobs": [-1.0]}}]},
    {"prompt_token_ids": "not ids", "choices": []},
])
def test_an_answer_that_cannot_be_recorded_exactly_is_an_error_row_and_a_502(setup: Setup,
                                                                             reply: dict[str, Any]) -> None:
    setup.engine.reply = reply
    r = post(setup, "completions", {"model": "x", "prompt": "p", "logprobs": 0})
    assert r.status_code == 502 and "could not record" in r.json()["error"]["message"]
    assert len(setup.engine.seen) == 1
    (call,) = setup.store.model_calls(setup.route.rollout_id)
    assert call.status == "error" and "could not record" in call.error
    assert call.completion_ids == [] and call.logprobs == []  # nothing inexact


def test_a_stream_that_cannot_be_read_is_an_error_row_and_an_error_event(setup: Setup) -> None:
    setup.engine.stream_reply = [b'data: {"choices": [{"index": 0, "delta": {"content": "a"}, "token_ids": [7],'
                                 b' "logprobs": {"content": [{"logprob": null}]}}]}\n\n', b"data: [DONE]\n\n"]
    r = post(setup, "chat/completions", {"model": "x", "messages": MESSAGES, "stream": True})
    assert "could not record" in r.text and "[DONE]" not in r.text
    (call,) = setup.store.model_calls(setup.route.rollout_id)
    assert call.status == "error" and "could not record" in call.error and call.completion_ids == []


def test_a_failing_store_is_a_clear_500_not_a_lost_call(setup: Setup, monkeypatch) -> None:
    def refuse(call):
        raise OSError("disk full")

    monkeypatch.setattr(setup.store, "add_model_call", refuse)
    r = post(setup, "chat/completions", {"model": "x", "messages": MESSAGES})
    assert r.status_code == 500 and "could not record this call" in r.json()["error"]["message"]
    r = post(setup, "chat/completions", {"model": "x", "messages": MESSAGES, "n": 2})  # refused, not reached
    assert r.status_code == 400 and "could not record the refusal" in r.json()["error"]["message"]
    assert len(setup.engine.seen) == 1


def chunked_upload(url: str, total: int, block: bytes) -> tuple[int | None, int]:
    """POST `total` bytes with Transfer-Encoding: chunked; (status or None, bytes handed to the socket)."""
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"model": "x", "messages": [{"role": "user", "content": "'
        while sent < total:
            sent += len(block)
            yield block

    try:
        r = httpx.post(url, content=body(), headers={"content-type": "application/json"}, timeout=60)
        return r.status_code, sent
    except httpx.TransportError:  # the proxy hung up on the rest of the body before its answer was read
        return None, sent


def test_a_chunked_body_far_over_the_limit_is_refused_without_buffering_it(setup: Setup) -> None:
    url = f"{setup.route.openai_base}/chat/completions"
    block = b"a" * (256 * 1024)
    limit = load_settings(environ={"APPLIANCE_HOME": "/nonexistent"}).proxy.max_request_bytes
    gc.collect()
    tracemalloc.start()
    try:
        status, sent = chunked_upload(url, 400 * MiB, block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the old proxy held the whole 400 MiB (and a copy) before answering; now at most the limit and buffers
    assert peak < limit + 16 * MiB, f"peak traced memory {peak / MiB:.0f} MiB"
    assert status in (413, None) and sent < 400 * MiB
    (call,) = setup.store.model_calls(setup.route.rollout_id)
    assert call.status == "error" and "max_request_bytes" in call.error
    assert setup.engine.seen == []


def test_admission_comes_before_the_body_is_read(store: Store, tmp_path) -> None:
    one = load_settings(environ={"APPLIANCE_HOME": str(tmp_path / "h"),
                                 "APPLIANCE_PROXY__MAX_CONCURRENCY_PER_ROLLOUT": "1"})
    with serve(store, one) as s:
        url = f"{s.route.openai_base}/chat/completions"
        release = threading.Event()

        def slow() -> Iterator[bytes]:  # holds the rollout's only slot while its body trickles in
            yield b'{"model": "x", "messages": '
            release.wait(20)
            yield json.dumps(MESSAGES).encode() + b"}"

        first: dict[str, Any] = {}
        t = threading.Thread(target=lambda: first.update(r=httpx.post(url, content=slow(), timeout=30)))
        t.start()
        try:
            for _ in range(200):  # until the first request holds the slot (its body still unread)
                if s.proxy._active.get(s.route.rollout_id):
                    break
                threading.Event().wait(0.05)
            # a second request is refused at once, its (large) body unread
            r = httpx.post(url, content=b"x" * (1 * MiB), timeout=30)
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
        finally:
            release.set()
            t.join(30)
        assert first["r"].status_code == 200, first["r"].text


def test_a_stream_whose_harness_hangs_up_while_a_write_waits_is_closed_at_once() -> None:
    """The relay's `finally` writes the call's error row: it must run when the response ends, not at the next
    garbage collection (Starlette's own stream left the generator suspended; the suite once saw no row 20 s on)."""
    order: list[str] = []

    async def respond(cls: type[StreamingResponse]) -> None:
        async def body() -> Any:
            try:
                while True:
                    yield b"data: x\n\n"
            finally:
                order.append("generator closed")

        writes = 0

        async def send(message: dict[str, Any]) -> None:
            nonlocal writes
            writes += 1
            if writes >= 3:  # the harness stopped reading: the write waits for a drain that never comes
                await asyncio.Event().wait()

        async def receive() -> dict[str, Any]:
            await asyncio.sleep(0.05)
            return {"type": "http.disconnect"}

        scope = {"type": "http", "asgi": {"spec_version": "2.3"}}
        await cls(body(), media_type="text/event-stream")(scope, receive, send)
        order.append("response returned")

    gc.disable()  # the generator must be closed by the response, not by a collection
    try:
        asyncio.run(respond(RelayResponse))
    finally:
        gc.enable()
    assert order == ["generator closed", "response returned"]


def raw_head(url: str, path: str, headers: Iterator[bytes]) -> tuple[bytes, int]:
    """Send a request head header by header on a raw socket (a client library would hold it whole); what came
    back before the connection ended, and the bytes the proxy took."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        try:
            sock.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n".encode())
            for header in headers:
                sock.sendall(header)
                sent += len(header)
            body = json.dumps({"model": "x", "messages": MESSAGES}).encode()
            sock.sendall(b"content-length: %d\r\n\r\n" % len(body) + body)
        except OSError:  # the proxy closed the connection on the rest of the head
            pass
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
                if b"\r\n\r\n" in got and (b"431" in got[:12] or b"content-length" in got.lower()):
                    break
        except OSError:
            pass
    return got, sent


def test_request_headers_are_capped_at_the_door_in_bytes_and_in_number(setup: Setup) -> None:
    # Issue 47: uvicorn kept every header, whatever its size or number, before any route could refuse the
    # request: six of 100 MiB from a sandbox raised the appliance from 181 to 961 MiB
    from urllib.parse import urlsplit

    url = setup.route.openai_base
    path = urlsplit(url).path + "/chat/completions"

    def big() -> Iterator[bytes]:  # one 16 MiB header, streamed in 64 KiB
        yield b"x-big: "
        for _ in range(256):
            yield b"a" * 65536
        yield b"\r\n"

    gc.collect()
    tracemalloc.start()
    try:
        got, sent = raw_head(url, path, big())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, f"peak traced memory {peak / MiB:.1f} MiB"
    assert sent < 16 * MiB, sent  # the rest of the head was never read
    assert got == b"" or got.startswith(b"HTTP/1.1 431"), got[:200]  # (or the refusal was lost to a reset)
    many, _ = raw_head(url, path, (b"x-h%d: v\r\n" % i for i in range(500)))
    assert many.startswith(b"HTTP/1.1 431") and b"more than 100 headers" in many, many[:300]
    assert setup.engine.seen == []
    # a harness's usual head still goes through
    ok, _ = raw_head(url, path, (b"x-h%d: v\r\n" % i for i in range(20)))
    assert ok.startswith(b"HTTP/1.1 200"), ok[:300]
