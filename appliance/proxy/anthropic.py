"""The Anthropic dialect: `POST /r/{token}/v1/messages` as an OpenAI chat call to the engine.

litellm (as a library) translates the request to a chat request and the chat response back to a
Messages response; the call is recorded like any chat call (request as the engine saw it, response as
the harness got it). A streaming request is answered from the finished response as the Messages event
sequence (message_start, content blocks, message_delta, message_stop): the engine call itself is not
streamed, which costs time-to-first-token but no tokens, and the row is committed before the first event.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from appliance.proxy.app import Proxy
from appliance.proxy.checks import CHAT, Refusal, is_int

_adapter: Any = None
_lock = threading.Lock()

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               410: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error",
               502: "api_error", 503: "overloaded_error"}


def _litellm() -> tuple[Any, Any]:
    """Import litellm once, offline (it otherwise tries to fetch a price list at import)."""
    global _adapter
    with _lock:
        if _adapter is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm
            from litellm import ModelResponse
            from litellm.llms.anthropic.messages.adapters.transformation import LiteLLMAnthropicMessagesAdapter

            # it printed a "Provider List" banner to the appliance's terminal for every Claude Code request
            litellm.suppress_debug_info = True
            _adapter = (LiteLLMAnthropicMessagesAdapter(), ModelResponse)
    return _adapter


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


class AnthropicDialect:
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    async def messages(self, request: Request) -> Response:
        started = time.perf_counter()
        rollout_id, body, slot = None, None, False
        try:
            rollout_id = self.proxy.rollout_of(request).id
            self.proxy.take_slot(rollout_id)
            slot = True
            body = await self.proxy.body_of(request)
            if not isinstance(body.get("messages"), list) or not is_int(body.get("max_tokens")):
                raise Refusal(400, "a Messages request needs `messages` (a list) and `max_tokens` (an integer)",
                              "invalid_request_error", record=True)
            adapter, model_response = await anyio.to_thread.run_sync(_litellm)
            chat, tool_names = _to_chat(adapter, body)
            self.proxy.calls.restore(rollout_id, chat)
            sent = self.proxy.engine_body(chat, CHAT)

            def shape(data: dict[str, Any]) -> dict[str, Any]:
                message = adapter.translate_openai_response_to_anthropic(model_response(**data), tool_names)
                message = json.loads(json.dumps(message, default=_plain))
                message["model"] = body.get("model", message.get("model"))
                return message

            message = await self.proxy.complete(rollout_id, CHAT, chat, sent, shape, self.proxy.side(body))
            if body.get("stream"):
                return StreamingResponse(_events(message), media_type="text/event-stream")
            return JSONResponse(message)
        except Refusal as r:
            if r.record and rollout_id is not None:
                r = await self.proxy.refusal_row(r, rollout_id, body, started)
            return JSONResponse(anthropic_error(r.status, r.message), r.status, headers=r.headers)
        finally:
            if slot and rollout_id is not None:
                self.proxy.free_slot(rollout_id)


    async def count_tokens(self, request: Request) -> Response:
        """`POST /v1/messages/count_tokens`: the prompt's tokens as the engine's tokenizer counts them."""
        started = time.perf_counter()
        rollout_id, body, slot = None, None, False
        try:
            rollout_id = self.proxy.rollout_of(request).id
            self.proxy.take_slot(rollout_id)
            slot = True
            body = await self.proxy.body_of(request)
            if not isinstance(body.get("messages"), list):
                raise Refusal(400, "a count_tokens request needs `messages` (a list)", "invalid_request_error",
                              record=True)
            adapter, _ = await anyio.to_thread.run_sync(_litellm)
            chat, _ = _to_chat(adapter, {"max_tokens": 1, **body})  # the translation wants a max_tokens
            return JSONResponse({"input_tokens": await self.proxy.count(rollout_id, chat)})
        except Refusal as r:
            if r.record and rollout_id is not None:
                r = await self.proxy.refusal_row(r, rollout_id, body, started)
            return JSONResponse(anthropic_error(r.status, r.message), r.status, headers=r.headers)
        finally:
            if slot and rollout_id is not None:
                self.proxy.free_slot(rollout_id)


def _to_chat(adapter: Any, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(the chat request, litellm's tool-name map) for a Messages request."""
    try:
        chat, tool_names = adapter.translate_anthropic_to_openai(body)
    except Exception as e:  # litellm raises many types for malformed input
        raise Refusal(400, f"cannot read the Messages request: {e}", "invalid_request_error", record=True) from None
    chat = _drop_none(json.loads(json.dumps(chat, default=_plain)))
    chat.pop("stream", None)
    chat.pop("stream_options", None)
    return chat, tool_names


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):  # litellm hands back pydantic objects or plain dicts, by version
        return value.model_dump()
    return str(value)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _events(message: dict[str, Any]) -> Iterator[bytes]:
    """The Messages streaming event sequence for a finished message."""
    usage = message.get("usage") or {}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            yield _sse("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {**block, "input": {}}})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}})
        else:
            yield _sse("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "text", "text": ""}})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "text_delta", "text": block.get("text", "")}})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
    yield _sse("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
                                 "usage": {"output_tokens": usage.get("output_tokens", 0)}})
    yield _sse("message_stop", {"type": "message_stop"})
