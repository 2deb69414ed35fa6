"""The model-boundary proxy: the only door between a harness and the engine, and its recorder.

Routes live under `/r/{token}/`, where the token is the rollout's secret (see routes.py):
OpenAI `v1/chat/completions` (stream or not, tools), `v1/completions`, `v1/models`, `v1/responses`
(responses.py translates it to a chat call), and Anthropic `v1/messages` (anthropic.py translates it)
and `v1/messages/count_tokens` (the engine's `/tokenize`; a `count` row: the prompt's ids, nothing
sampled). Every call is forwarded with
`return_token_ids` and logprobs forced on, whatever model name the harness sent is replaced by the
engine's current one, and one model-call row (request as the engine saw it, response as the harness got
it, prompt and completion token ids, per-token logprobs, policy version, latency, status) is committed
before the response (for streams: before `[DONE]`) goes back. Fields the harness did not ask for are
stripped, so SDKs see a normal response.

Side calls: a call whose request names one of `proxy.side_models` (the recipes configure each harness's
"small model", which it uses for titles and summaries, under that name) is recorded with status `side`:
the same exact ids, its own row, never a working turn and not trained (`proxy.train_side_calls` records it
as `ok` instead). A token count is a `count` row. The tree and the trainer read `ok` rows only.

Refusals: unknown token 401, finished rollout 410, a request that would not come back as one exactly
recordable sampled sequence 400 (checks.py), oversized body 413, a request head over 64 KiB or 100 headers
431 (server.py, before any route), too many calls in flight for the
rollout 429, engine not SERVING 503 (both with Retry-After, which SDKs honour). An engine failure is a
502 and an `error` row, never model output; so is an answer the proxy cannot read or record (a 500 when
the store itself refuses the row). A harness that hangs up mid-stream leaves an `error` row with the
tokens received so far.

Memory: a rollout's slot (`proxy.max_concurrency_per_rollout`) is taken before its body is read, and a
body is read as a stream and abandoned at `proxy.max_request_bytes`, so one rollout holds at most that
many bodies of that size (and their parsed JSON) however many connections it opens; a refused
connection is closed with its body unread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from appliance.config import Settings
from appliance.proxy.answers import ABORTED, EngineAborted, Tokens, aborted, merged, strip
from appliance.proxy.calls import SampledCalls
from appliance.proxy.checks import CHAT, COMPLETION, Refusal, check_request, is_number, read_body
from appliance.proxy.routes import hash_token
from appliance.schemas import ModelCall, Rollout, RolloutStatus
from appliance.seams import ServingEngine
from appliance.serving.process import ENGINE_KEEPALIVE_S
from appliance.store import Store

ENGINE_PATHS = {CHAT: "/v1/chat/completions", COMPLETION: "/v1/completions"}
COUNT = "count"  # a row's status for a token count (`count`): the engine tokenized a prompt and sampled nothing
SIDE = "side"  # a row's status for a side call (proxy.side_models): sampled, recorded, not a working turn


class RelayResponse(StreamingResponse):
    """A stream whose body generator is closed when the response ends, however it ends.

    Starlette cancels a stream whose client hung up; cancelled inside `send` (a harness that stopped reading
    fills the socket, so the write waits), the generator stays suspended at its `yield`, and its `finally`,
    which writes the call's error row and frees the rollout's slot, ran only when garbage collection got
    to it: seconds or minutes later."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


def openai_error(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


class Proxy:
    def __init__(self, store: Store, engine: ServingEngine, settings: Settings) -> None:
        self.store = store
        self.engine = engine
        self.limits = settings.proxy
        self.served_name = settings.engine.served_model_name
        self._client: aiohttp.ClientSession | None = None
        self._active: dict[str, int] = {}  # calls in flight per rollout (one event loop: no lock needed)
        self.calls = SampledCalls()  # what each rollout's tool calls were sampled as (calls.py)

    @property
    def client(self) -> aiohttp.ClientSession:
        # aiohttp rather than httpx on this hot path: ~1.5 ms less per call measured here, which is
        # most of the proxy's added latency (scripts/bench proxy)
        # idle connections are dropped before the engine's server closes them (it does after
        # ENGINE_KEEPALIVE_S): aiohttp's default of 15 s let a call go out on a socket being closed, and
        # it failed as "Can not write request body" (1 of 727 calls in scripts/chaos load)
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(
                base_url=self.engine.base_url,
                connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=ENGINE_KEEPALIVE_S - 2),
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
        return await read_body(request.stream(), request.headers.get("content-length"), self.limits.max_request_bytes)

    def take_slot(self, rollout_id: str) -> None:
        """Before the body is read: a rollout's requests never hold more than its slots' worth of memory."""
        if self._active.get(rollout_id, 0) >= self.limits.max_concurrency_per_rollout:
            raise Refusal(429, f"rollout already has {self.limits.max_concurrency_per_rollout} model calls in flight"
                          " (proxy.max_concurrency_per_rollout)", "rate_limit_error",
                          {"Retry-After": "1", "Connection": "close"})  # the body stays unread
        self._active[rollout_id] = self._active.get(rollout_id, 0) + 1

    def free_slot(self, rollout_id: str) -> None:
        n = self._active.get(rollout_id, 1) - 1
        if n:
            self._active[rollout_id] = n
        else:
            self._active.pop(rollout_id, None)

    def admit(self) -> None:
        if not self.engine.try_admit():
            raise Refusal(503, f"the engine is {self.engine.state}, not serving; retry shortly", "engine_unavailable",
                          {"Retry-After": str(self.limits.retry_after_s)})

    def leave(self) -> None:
        self.engine.release()

    # --- recording ------------------------------------------------------------------------------
    def side(self, body: dict[str, Any]) -> bool:
        """Is this a side call the harness marked by its model name (and not to be trained)? See
        proxy.side_models: the harness, not the proxy, knows a title call from a turn."""
        return not self.limits.train_side_calls and body.get("model") in self.limits.side_models

    def call_row(self, rollout_id: str, request: dict[str, Any], started: float, *, status: str = "ok",
                 response: dict[str, Any] | None = None, error: str | None = None,
                 tokens: Tokens | None = None, side: bool = False) -> ModelCall:
        tokens = tokens or Tokens()
        status = SIDE if side and status == "ok" else status
        # the engine (--generation-config vllm) samples at 1.0 when the request names no temperature
        temperature = request.get("temperature")
        return ModelCall(None, rollout_id, -1, status, request, response, tokens.prompt, tokens.completion,
                         tokens.logprobs, self.engine.policy_version, time.perf_counter() - started, error,
                         temperature=float(temperature) if is_number(temperature) else 1.0)

    async def record(self, call: ModelCall) -> None:
        # sqlite may wait on the write lock (the trainer writes too): never block the event loop on it.
        # Shielded: a harness that hangs up as its stream ends cancels the relay, and anyio honoured that
        # cancel before the write's thread started, so the finished call had no row at all.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.store.add_model_call, call)

    # --- the engine-facing core, shared by both dialects -------------------------------------------
    def engine_body(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        check_request(body, kind)
        out = dict(body)
        out["model"] = self.engine.model_name()
        out["return_token_ids"] = True
        if kind == CHAT:
            out["logprobs"] = True
        elif body.get("logprobs") is None:
            out["logprobs"] = 0
        cap, capped = self.limits.max_tokens, False
        for key in ("max_tokens", "max_completion_tokens"):
            if body.get(key) is not None:  # a positive integer: check_request said so
                out[key], capped = min(body[key], cap), True
        if not capped:
            out["max_tokens"] = cap
        return out

    async def complete(self, rollout_id: str, kind: str, body: dict[str, Any], sent: dict[str, Any],
                       shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                       side: bool = False) -> dict[str, Any]:
        """One non-streaming engine call, recorded; returns what the harness gets (after `shape`)."""
        started = time.perf_counter()
        self.admit()
        try:
            try:
                async with self.client.post(ENGINE_PATHS[kind], json=sent) as r:
                    status, raw = r.status, await r.read()
            except ENGINE_ERRORS as e:
                await self.commit(self.call_row(rollout_id, sent, started, status="error",
                                                error=f"engine unreachable: {e!r}"))
                raise Refusal(502, f"the engine failed: {e!r}", "engine_error") from None
            if status != 200:
                text = raw.decode(errors="replace")
                await self.commit(self.call_row(rollout_id, sent, started, status="error",
                                                error=f"engine answered {status}: {text[:2000]}"))
                raise _engine_refusal(status, text)
            data: Any = None
            try:
                data = json.loads(raw)
                tokens = Tokens()
                tokens.take(kind, data)
                tokens.check()
                if aborted(data):  # cut off by the engine (its /sleep aborts what is still in flight)
                    await self.commit(self.call_row(rollout_id, sent, started, status="error", response=data,
                                                    tokens=tokens, error=ABORTED))
                    raise Refusal(502, f"the engine failed: {ABORTED}", "engine_error")
                self.calls.remember(rollout_id, data)
                strip(data, body, kind)
                if shape is not None:
                    data = shape(data)
            except Refusal:
                raise
            except Exception as e:  # noqa: BLE001 - whatever the engine sent, the call that reached it is a row
                await self.unrecordable(rollout_id, sent, started, data, e)
            await self.commit(self.call_row(rollout_id, sent, started, response=data, tokens=tokens, side=side))
            return data
        finally:
            self.leave()

    async def count(self, rollout_id: str, chat: dict[str, Any]) -> int:
        """The prompt's token count by the engine's own tokenizer (`/tokenize`, with the template and tools
        the call would use), recorded as a `count` row: its prompt ids and no completion. Nothing was
        sampled, so it never enters a training sample (the tree reads `ok` rows only)."""
        started = time.perf_counter()
        sent = {"model": self.engine.model_name(), "messages": chat.get("messages") or [],
                "add_generation_prompt": True, **({"tools": chat["tools"]} if chat.get("tools") else {})}
        self.admit()
        try:
            try:
                async with self.client.post("/tokenize", json=sent) as r:
                    status, raw = r.status, await r.read()
            except ENGINE_ERRORS as e:
                await self.commit(self.call_row(rollout_id, sent, started, status="error",
                                                error=f"engine unreachable: {e!r}"))
                raise Refusal(502, f"the engine failed: {e!r}", "engine_error") from None
            if status != 200:
                text = raw.decode(errors="replace")
                await self.commit(self.call_row(rollout_id, sent, started, status="error",
                                                error=f"engine answered {status}: {text[:2000]}"))
                raise _engine_refusal(status, text)
            tokens = Tokens()
            try:
                tokens.prompt = [int(i) for i in json.loads(raw)["tokens"]]
            except (ValueError, KeyError, TypeError) as e:
                await self.unrecordable(rollout_id, sent, started, None, e)
            await self.commit(self.call_row(rollout_id, sent, started, status=COUNT,
                                            response={"input_tokens": len(tokens.prompt)}, tokens=tokens))
            return len(tokens.prompt)
        finally:
            self.leave()

    async def unrecordable(self, rollout_id: str, sent: dict[str, Any], started: float, data: Any,
                           e: Exception) -> None:
        """An answer the proxy cannot turn into an exact record: an error row (no ids), and a 502."""
        message = f"the proxy could not record the engine's answer: {type(e).__name__}: {e}"[:2000]
        await self.commit(self.call_row(rollout_id, sent, started, status="error", error=message,
                                        response=data if isinstance(data, dict) else None))
        raise Refusal(502, message, "engine_error")

    async def refusal_row(self, r: Refusal, rollout_id: str, body: dict[str, Any] | None, started: float) -> Refusal:
        """The error row of a call refused before the engine; if the store refuses it, the answer says so."""
        try:
            await self.record(self.call_row(rollout_id, body or {}, started, status="error", error=r.message))
        except Exception as e:  # noqa: BLE001 - nothing reached the engine: the refusal stands, and says this
            return Refusal(r.status, f"{r.message} (and the proxy could not record the refusal: {type(e).__name__}: "
                           f"{e})", r.kind, r.headers)
        return r

    async def commit(self, call: ModelCall) -> None:
        """Record, or say clearly that the call is lost (the store refused the row: disk full, locked too long)."""
        try:
            await self.record(call)
        except Exception as e:  # noqa: BLE001 - the harness must hear that this call was not recorded
            raise Refusal(500, f"the proxy could not record this call in the store: {type(e).__name__}: {e}",
                          "internal_error") from None

    async def stream(self, rollout_id: str, kind: str, body: dict[str, Any], sent: dict[str, Any],
                     side: bool = False) -> Response:
        """A streamed engine call; the response's relay owns the rollout's slot from here on."""
        started = time.perf_counter()
        self.admit()
        try:
            upstream = await self.client.post(ENGINE_PATHS[kind], json=sent)
        except ENGINE_ERRORS as e:
            self.leave()
            await self.commit(self.call_row(rollout_id, sent, started, status="error",
                                            error=f"engine unreachable: {e!r}"))
            raise Refusal(502, f"the engine failed: {e!r}", "engine_error") from None
        if upstream.status != 200:
            text = (await upstream.read()).decode(errors="replace")
            upstream.release()
            self.leave()
            await self.commit(self.call_row(rollout_id, sent, started, status="error",
                                            error=f"engine answered {upstream.status}: {text[:2000]}"))
            raise _engine_refusal(upstream.status, text)
        return RelayResponse(self._relay(rollout_id, kind, body, sent, started, upstream, side),
                             media_type="text/event-stream")

    async def _relay(self, rollout_id: str, kind: str, body: dict[str, Any], sent: dict[str, Any], started: float,
                     upstream: aiohttp.ClientResponse, side: bool) -> AsyncIterator[bytes]:
        tokens, recorded = Tokens(), False
        chunks: list[dict[str, Any]] = []
        try:
            failure, exact = None, True
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
                            tokens.check()
                            if aborted(merged(chunks)):
                                raise EngineAborted(ABORTED)
                            recorded = True  # set first: a cancel during the write must not add a second row
                            await self.record(self.call_row(rollout_id, sent, started, response=merged(chunks),
                                                            tokens=tokens, side=side))
                            self.calls.remember(rollout_id, merged(chunks))
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
            except EngineAborted:
                failure = ABORTED
            except (*ENGINE_ERRORS, EngineStreamError) as e:
                failure = f"engine failed mid-stream: {e!r}"
            except Exception as e:  # noqa: BLE001 - a chunk the proxy cannot read or record: a row, never lost
                failure, exact = f"the proxy could not record the engine's stream: {type(e).__name__}: {e}", False
            if failure is not None:
                recorded = True
                try:
                    # ids of a stream the proxy could not read are not trusted: the row keeps none of them
                    await self.record(self.call_row(rollout_id, sent, started, status="error", error=failure[:2000],
                                                    response=merged(chunks), tokens=tokens if exact else None))
                except Exception as e:  # noqa: BLE001 - the store refused the row: the harness hears it
                    failure = f"{failure}; and the store refused its error row: {type(e).__name__}: {e}"
                yield b"data: " + json.dumps(openai_error(502, failure, "engine_error")).encode() + b"\n\n"
        finally:
            if not recorded:  # the harness hung up: cancelled, so record synchronously
                self.store.add_model_call(self.call_row(
                    rollout_id, sent, started, status="error", response=merged(chunks), tokens=tokens,
                    error="the harness disconnected mid-stream"))
            self.leave()
            self.free_slot(rollout_id)
            # an unfinished stream must drop its connection (the engine then aborts the request)
            upstream.release() if upstream.content.at_eof() else upstream.close()

    # --- OpenAI routes --------------------------------------------------------------------------
    async def openai(self, request: Request, kind: str) -> Response:
        started = time.perf_counter()
        rollout_id, body, slot = None, None, False
        try:
            rollout_id = self.rollout_of(request).id
            self.take_slot(rollout_id)
            slot = True
            body = await self.body_of(request)
            self.calls.restore(rollout_id, body)
            sent = self.engine_body(body, kind)
            side = self.side(body)
            if body.get("stream"):
                response = await self.stream(rollout_id, kind, body, sent, side)
                slot = False  # the relay frees it when the stream ends
                return response
            return JSONResponse(await self.complete(rollout_id, kind, body, sent, side=side))
        except Refusal as r:
            if r.record and rollout_id is not None:
                r = await self.refusal_row(r, rollout_id, body, started)
            return JSONResponse(openai_error(r.status, r.message, r.kind), r.status, headers=r.headers)
        finally:
            if slot and rollout_id is not None:
                self.free_slot(rollout_id)

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


def _engine_refusal(status: int, text: str) -> Refusal:
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text[:2000]
    if status >= 500:
        return Refusal(502, f"the engine failed: {message}", "engine_error")
    return Refusal(status, message, "invalid_request_error")  # the request's fault: the harness sees why

