"""The model-boundary proxy: the only door between a harness and the engine, and its recorder.

Routes live under `/r/{token}/`, where the token is the rollout's secret (see routes.py):
OpenAI `v1/chat/completions` (stream or not, tools), `v1/completions`, `v1/models`, and Anthropic
`v1/messages` (anthropic.py translates it to a chat call). Every call is forwarded with
`return_token_ids` and logprobs forced on, whatever model name the harness sent is replaced by the
engine's current one, and one model-call row (request as the engine saw it, response as the harness got
it, prompt and completion token ids, per-token logprobs, policy version, latency, status) is committed
before the response (for streams: before `[DONE]`) goes back. Fields the harness did not ask for are
stripped, so SDKs see a normal response.

Refusals: unknown token 401, finished rollout 410, oversized body 413, too many calls in flight for the
rollout 429, engine not SERVING 503 (both with Retry-After, which SDKs honour). An engine failure is a
502 and an `error` row, never model output. A harness that hangs up mid-stream leaves an `error` row
with the tokens received so far.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import aiohttp
import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from appliance.config import Settings
from appliance.proxy.routes import hash_token
from appliance.schemas import EngineState, ModelCall, Rollout, RolloutStatus
from appliance.store import Store

CHAT, COMPLETION = "chat", "completion"
ENGINE_PATHS = {CHAT: "/v1/chat/completions", COMPLETION: "/v1/completions"}
# what the engine adds because we ask for token ids; stripped unless the harness asked too
ID_FIELDS = ("prompt_token_ids", "prompt_text")


class EngineLike(Protocol):
    """What the proxy needs from the engine (appliance.serving.Engine is the real one)."""

    base_url: str
    policy_version: int

    @property
    def state(self) -> EngineState: ...

    def model_name(self) -> str: ...

    def try_admit(self) -> bool: ...

    def release(self) -> None: ...


class Refusal(Exception):
    """A call the proxy answers itself: status, message, error type, extra headers."""

    def __init__(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None,
                 record: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers, self.record = status, message, kind, headers or {}, record


def openai_error(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


class Proxy:
    def __init__(self, store: Store, engine: EngineLike, settings: Settings) -> None:
        self.store = store
        self.engine = engine
        self.limits = settings.proxy
        self.served_name = settings.engine.served_model_name
        self._client: aiohttp.ClientSession | None = None
        self._active: dict[str, int] = {}  # calls in flight per rollout (one event loop: no lock needed)

    @property
    def client(self) -> aiohttp.ClientSession:
        # aiohttp rather than httpx on this hot path: ~1.5 ms less per call measured here, which is
        # most of the proxy's added latency (scripts/bench proxy)
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(
                base_url=self.engine.base_url, connector=aiohttp.TCPConnector(limit=256),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=600))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    # --- admission ------------------------------------------------------------------------------
    def rollout_of(self, request: Request) -> Rollout:
        route = hash_token(request.path_params["token"])
        rollout = self.store.rollout_by_route(route)
        if rollout is None:
            if self.store.route_retired(route):
                raise Refusal(410, "this route was retired (its rollout was requeued or given a new route)",
                              "invalid_request_error")
            raise Refusal(401, "unknown route token", "authentication_error")
        if rollout.status == RolloutStatus.FINISHED:
            raise Refusal(410, f"rollout {rollout.id} is finished; its route is closed", "invalid_request_error")
        return rollout

    async def body_of(self, request: Request) -> dict[str, Any]:
        limit = self.limits.max_request_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise Refusal(413, f"request body of {declared} bytes exceeds proxy.max_request_bytes={limit}",
                          "invalid_request_error", record=True)
        raw = await request.body()
        if len(raw) > limit:
            raise Refusal(413, f"request body of {len(raw)} bytes exceeds proxy.max_request_bytes={limit}",
                          "invalid_request_error", record=True)
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise Refusal(400, f"request body is not valid JSON: {e}", "invalid_request_error", record=True) from None
        if not isinstance(body, dict):
            raise Refusal(400, "request body must be a JSON object", "invalid_request_error", record=True)
        return body

    def admit(self, rollout_id: str) -> None:
        if self._active.get(rollout_id, 0) >= self.limits.max_concurrency_per_rollout:
            raise Refusal(429, f"rollout already has {self.limits.max_concurrency_per_rollout} model calls in flight"
                          " (proxy.max_concurrency_per_rollout)", "rate_limit_error", {"Retry-After": "1"})
        if not self.engine.try_admit():
            raise Refusal(503, f"the engine is {self.engine.state}, not serving; retry shortly", "engine_unavailable",
                          {"Retry-After": str(self.limits.retry_after_s)})
        self._active[rollout_id] = self._active.get(rollout_id, 0) + 1

    def leave(self, rollout_id: str) -> None:
        self.engine.release()
        n = self._active.get(rollout_id, 1) - 1
        if n:
            self._active[rollout_id] = n
        else:
            self._active.pop(rollout_id, None)

    # --- recording ------------------------------------------------------------------------------
    def call_row(self, rollout_id: str, request: dict[str, Any], started: float, *, status: str = "ok",
                 response: dict[str, Any] | None = None, error: str | None = None,
                 tokens: Tokens | None = None) -> ModelCall:
        tokens = tokens or Tokens()
        # the engine (--generation-config vllm) samples at 1.0 when the request names no temperature
        temperature = request.get("temperature")
        return ModelCall(None, rollout_id, -1, status, request, response, tokens.prompt, tokens.completion,
                         tokens.logprobs, self.engine.policy_version, time.perf_counter() - started, error,
                         temperature=float(temperature) if isinstance(temperature, (int, float)) else 1.0)

    async def record(self, call: ModelCall) -> None:
        # sqlite may wait on the write lock (the trainer writes too): never block the event loop on it
        await anyio.to_thread.run_sync(self.store.add_model_call, call)

    # --- the engine-facing core, shared by both dialects -------------------------------------------
    def engine_body(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
            raise Refusal(400, "n and best_of must be 1: the proxy records one completion per call",
                          "invalid_request_error", record=True)
        out = dict(body)
        out["model"] = self.engine.model_name()
        out["return_token_ids"] = True
        if kind == CHAT:
            out["logprobs"] = True
        elif body.get("logprobs") is None:
            out["logprobs"] = 0
        cap, capped = self.limits.max_tokens, False
        for key in ("max_tokens", "max_completion_tokens"):
            if body.get(key) is not None:
                if not isinstance(body[key], int) or body[key] < 1:
                    raise Refusal(400, f"{key} must be a positive integer, got {body[key]!r}",
                                  "invalid_request_error", record=True)
                out[key], capped = min(body[key], cap), True
        if not capped:
            out["max_tokens"] = cap
        return out

    async def complete(self, rollout_id: str, kind: str, body: dict[str, Any], sent: dict[str, Any],
                       shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """One non-streaming engine call, recorded; returns what the harness gets (after `shape`)."""
        started = time.perf_counter()
        self.admit(rollout_id)
        try:
            try:
                async with self.client.post(ENGINE_PATHS[kind], json=sent) as r:
                    status, raw = r.status, await r.read()
            except ENGINE_ERRORS as e:
                await self.record(self.call_row(rollout_id, sent, started, status="error",
                                                error=f"engine unreachable: {e!r}"))
                raise Refusal(502, f"the engine failed: {e!r}", "engine_error") from None
            if status != 200:
                text = raw.decode(errors="replace")
                await self.record(self.call_row(rollout_id, sent, started, status="error",
                                                error=f"engine answered {status}: {text[:2000]}"))
                raise _engine_refusal(status, text)
            data = json.loads(raw)
            tokens = Tokens()
            tokens.take(kind, data)
            strip(data, body, kind)
            if shape is not None:
                data = shape(data)
            await self.record(self.call_row(rollout_id, sent, started, response=data, tokens=tokens))
            return data
        finally:
            self.leave(rollout_id)

    async def stream(self, rollout_id: str, kind: str, body: dict[str, Any], sent: dict[str, Any]) -> Response:
        started = time.perf_counter()
        self.admit(rollout_id)
        try:
            upstream = await self.client.post(ENGINE_PATHS[kind], json=sent)
        except ENGINE_ERRORS as e:
            self.leave(rollout_id)
            await self.record(self.call_row(rollout_id, sent, started, status="error", error=f"engine unreachable: {e!r}"))
            raise Refusal(502, f"the engine failed: {e!r}", "engine_error") from None
        if upstream.status != 200:
            text = (await upstream.read()).decode(errors="replace")
            upstream.release()
            self.leave(rollout_id)
            await self.record(self.call_row(rollout_id, sent, started, status="error",
                                            error=f"engine answered {upstream.status}: {text[:2000]}"))
            raise _engine_refusal(upstream.status, text)
        return StreamingResponse(self._relay(rollout_id, kind, body, sent, started, upstream),
                                 media_type="text/event-stream")

    async def _relay(self, rollout_id: str, kind: str, body: dict[str, Any], sent: dict[str, Any], started: float,
                     upstream: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        tokens, recorded = Tokens(), False
        chunks: list[dict[str, Any]] = []
        try:
            try:
                pending = b""
                # Events that arrive together leave together: one write per network read, not per token.
                async for block in upstream.content.iter_any():
                    *events, pending = (pending + block).split(b"\n\n")
                    out = []
                    for event in events:
                        payload = event.strip()
                        if not payload.startswith(b"data:"):
                            continue
                        payload = payload[5:].strip()
                        if payload == b"[DONE]":
                            recorded = True  # set first: a cancel during the write must not add a second row
                            await self.record(self.call_row(rollout_id, sent, started, response=_merged(chunks),
                                                            tokens=tokens))
                            out.append(b"data: [DONE]\n\n")
                            continue
                        chunk = json.loads(payload)
                        if chunk.get("error"):
                            raise EngineStreamError(json.dumps(chunk["error"])[:2000])
                        tokens.take(kind, chunk)
                        strip(chunk, body, kind)
                        chunks.append(chunk)
                        out.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
                    if out:
                        yield b"".join(out)
                if not recorded:
                    raise EngineStreamError("the engine closed the stream before [DONE]")
            except (*ENGINE_ERRORS, EngineStreamError) as e:
                message = f"engine failed mid-stream: {e!r}"
                recorded = True
                await self.record(self.call_row(rollout_id, sent, started, status="error", error=message,
                                                response=_merged(chunks), tokens=tokens))
                yield b"data: " + json.dumps(openai_error(502, message, "engine_error")).encode() + b"\n\n"
        finally:
            if not recorded:  # the harness hung up: cancelled, so record synchronously
                self.store.add_model_call(self.call_row(
                    rollout_id, sent, started, status="error", response=_merged(chunks), tokens=tokens,
                    error="the harness disconnected mid-stream"))
            self.leave(rollout_id)
            # an unfinished stream must drop its connection (the engine then aborts the request)
            upstream.release() if upstream.content.at_eof() else upstream.close()

    # --- OpenAI routes --------------------------------------------------------------------------
    async def openai(self, request: Request, kind: str) -> Response:
        started = time.perf_counter()
        rollout_id, body = None, None
        try:
            rollout_id = self.rollout_of(request).id
            body = await self.body_of(request)
            sent = self.engine_body(body, kind)
            if body.get("stream"):
                return await self.stream(rollout_id, kind, body, sent)
            return JSONResponse(await self.complete(rollout_id, kind, body, sent))
        except Refusal as r:
            if r.record and rollout_id is not None:
                await self.record(self.call_row(rollout_id, body or {}, started, status="error", error=r.message))
            return JSONResponse(openai_error(r.status, r.message, r.kind), r.status, headers=r.headers)

    async def chat(self, request: Request) -> Response:
        return await self.openai(request, CHAT)

    async def completions(self, request: Request) -> Response:
        return await self.openai(request, COMPLETION)

    async def models(self, request: Request) -> Response:
        try:
            self.rollout_of(request)
        except Refusal as r:
            return JSONResponse(openai_error(r.status, r.message, r.kind), r.status)
        return JSONResponse({"object": "list", "data": [
            {"id": self.served_name, "object": "model", "created": 0, "owned_by": "appliance"}]})


class EngineStreamError(Exception):
    pass


ENGINE_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class Tokens:
    """Token ids and logprobs gathered from one response or a stream of chunks."""

    __slots__ = ("prompt", "completion", "logprobs")

    def __init__(self) -> None:
        self.prompt: list[int] = []
        self.completion: list[int] = []
        self.logprobs: list[float] = []

    def take(self, kind: str, data: dict[str, Any]) -> None:
        if data.get("prompt_token_ids"):
            self.prompt = data["prompt_token_ids"]
        for choice in data.get("choices") or ():
            if choice.get("prompt_token_ids"):
                self.prompt = choice["prompt_token_ids"]
            self.completion += choice.get("token_ids") or ()
            lp = choice.get("logprobs") or {}
            if kind == CHAT:
                self.logprobs += [c["logprob"] for c in lp.get("content") or ()]
            else:
                self.logprobs += lp.get("token_logprobs") or ()


def strip(data: dict[str, Any], asked: dict[str, Any], kind: str) -> None:
    """Remove what the proxy forced on and the harness did not ask for."""
    if not asked.get("return_token_ids"):
        for key in ID_FIELDS:
            data.pop(key, None)
        for choice in data.get("choices") or ():
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
    wanted = asked.get("logprobs") if kind == CHAT else asked.get("logprobs") is not None
    if not wanted:
        for choice in data.get("choices") or ():
            choice["logprobs"] = None


def _merged(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A stream's chunks folded into one record: text, tool-call deltas and the finish reason."""
    if not chunks:
        return None
    text: list[str] = []
    tool_calls: list[Any] = []
    finish = None
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or choice.get("text") or "")
            tool_calls += delta.get("tool_calls") or ()
            finish = choice.get("finish_reason") or finish
    return {"id": chunks[0].get("id"), "stream": True, "text": "".join(text), "tool_call_deltas": tool_calls,
            "finish_reason": finish}


def _engine_refusal(status: int, text: str) -> Refusal:
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text[:2000]
    if status >= 500:
        return Refusal(502, f"the engine failed: {message}", "engine_error")
    return Refusal(status, message, "invalid_request_error")  # the request's fault: the harness sees why

