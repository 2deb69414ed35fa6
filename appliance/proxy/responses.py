"""The OpenAI Responses dialect (Codex CLI speaks it): `POST /r/{token}/v1/responses` as a chat call.

The request's `instructions` and `input` items become chat messages (a `function_call` item joins the
assistant turn before it as a tool call, a `function_call_output` item is a `tool` message), its function
tools chat tools; the engine's chat answer comes back as `message` and `function_call` output items. The
call is recorded like any chat call (request as the engine saw it, response as the harness got it): the
tool call's tokens are the ones the engine sampled. A streaming request is answered from the finished
response as the Responses event sequence, like the Anthropic dialect's (the engine call is not streamed).

`custom` tools (free-form input, e.g. Codex's apply_patch for some models) are offered to the model as
function tools with one string parameter `input`, and their calls go back as `custom_tool_call` items; the
function tools of a `namespace` (Codex groups its sub-agent tools so) are offered by their own names. Tools
the provider would run itself (`web_search`, `file_search`, `code_interpreter`, ...: Codex 0.171 offers
web_search to every provider) are left out: no provider runs them here, so the model is not shown them.
Refused, with the reason: `previous_response_id` (the door keeps no conversation: the harness sends the
whole input, as Codex does with `store: false`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from appliance.proxy.app import Proxy, openai_error
from appliance.proxy.checks import CHAT, Refusal, bad_request, is_int

# sampling fields that mean the same in both APIs
PASSED = ("temperature", "top_p", "parallel_tool_calls", "seed", "stop", "user")


def _text(content: Any) -> str:
    """The text of an item's content: a string or a list of input_text / output_text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise bad_request(f"a message's content must be a string or a list of parts, got {type(content).__name__}")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text", "refusal"):
            raise bad_request(f"content part {kind!r} is not supported: the engine reads text only")
        texts.append(part.get("text") or part.get("refusal") or "")
    return "".join(texts)


def to_chat(body: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """(the chat request, the names of custom tools) for a Responses request."""
    if body.get("previous_response_id"):
        raise bad_request("previous_response_id is not supported: the model door keeps no conversation state; "
                          "send the whole conversation in `input` (store: false)")
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": _text(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise bad_request("a Responses request needs `input`: a string or a list of items")
    custom: set[str] = set()
    tools: list[dict[str, Any]] = []
    offered = list(body.get("tools") or ())
    while offered:
        tool = offered.pop(0)
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "namespace":
            offered[:0] = tool.get("tools") or []
        elif kind == "function":
            fn = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None}
            tools.append({"type": "function", "function": fn})
        elif kind == "custom":
            custom.add(tool["name"])
            tools.append({"type": "function", "function": {
                "name": tool["name"], "description": tool.get("description", ""),
                "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}})
        elif kind is None:
            raise bad_request("each tool must be an object with a `type`")
        # else: a tool its provider runs (web_search, ...): nothing at the door can
    for item in items:
        if not isinstance(item, dict):
            raise bad_request("each `input` item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = {"developer": "system"}.get(item.get("role", "user"), item.get("role", "user"))
            messages.append({"role": role, "content": _text(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments") if kind == "function_call" else json.dumps({"input": item.get("input")})
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": arguments or ""}}
            if messages and messages[-1]["role"] == "assistant":  # the calls of one turn, after its text
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text(output)})
        elif kind == "reasoning":
            continue  # the engine writes none; a harness may echo an empty one back
        else:
            raise bad_request(f"input item type {kind!r} is not supported at the model door")
    chat: dict[str, Any] = {"messages": messages}
    if tools:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("name"):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice is not None:
        chat["tool_choice"] = choice
    if body.get("max_output_tokens") is not None:
        if not is_int(body["max_output_tokens"]) or body["max_output_tokens"] < 1:
            raise bad_request(f"max_output_tokens must be a positive integer, got {body['max_output_tokens']!r}")
        chat["max_tokens"] = body["max_output_tokens"]
    for key in PASSED:
        if body.get(key) is not None:
            chat[key] = body[key]
    return chat, custom


def from_chat(data: dict[str, Any], body: dict[str, Any], custom: set[str]) -> dict[str, Any]:
    """The Responses object for a chat answer (its one choice)."""
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": message["content"], "annotations": []}]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        if fn.get("name") in custom:
            try:
                value = json.loads(fn.get("arguments") or "{}").get("input", "")
            except (ValueError, AttributeError):
                value = fn.get("arguments") or ""
            output.append({"type": "custom_tool_call", "id": f"ctc_{call.get('id')}", "call_id": call.get("id"),
                           "name": fn.get("name"), "input": value if isinstance(value, str) else json.dumps(value),
                           "status": "completed"})
        else:
            output.append({"type": "function_call", "id": f"fc_{call.get('id')}", "call_id": call.get("id"),
                           "name": fn.get("name"), "arguments": fn.get("arguments") or "", "status": "completed"})
    usage = data.get("usage") or {}
    cut = choice.get("finish_reason") == "length"
    return {
        "id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()),
        "model": body.get("model", data.get("model")), "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
        "instructions": body.get("instructions"), "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True), "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"), "metadata": body.get("metadata") or {},
        "store": False, "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "usage": {"input_tokens": usage.get("prompt_tokens", 0), "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": usage.get("completion_tokens", 0),
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": usage.get("total_tokens", 0)},
    }


class ResponsesDialect:
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    async def responses(self, request: Request) -> Response:
        started = time.perf_counter()
        rollout_id, body, slot = None, None, False
        try:
            rollout_id = self.proxy.rollout_of(request).id
            self.proxy.take_slot(rollout_id)
            slot = True
            body = await self.proxy.body_of(request)
            chat, custom = to_chat(body)
            self.proxy.calls.restore(rollout_id, chat)
            sent = self.proxy.engine_body(chat, CHAT)
            answer = await self.proxy.complete(rollout_id, CHAT, chat, sent,
                                               lambda data: from_chat(data, body or {}, custom), self.proxy.side(body))
            if body.get("stream"):
                return StreamingResponse(events(answer), media_type="text/event-stream")
            return JSONResponse(answer)
        except Refusal as r:
            if r.record and rollout_id is not None:
                r = await self.proxy.refusal_row(r, rollout_id, body, started)
            return JSONResponse(openai_error(r.status, r.message, r.kind), r.status, headers=r.headers)
        finally:
            if slot and rollout_id is not None:
                self.proxy.free_slot(rollout_id)


def events(response: dict[str, Any]) -> Iterator[bytes]:
    """The Responses streaming event sequence for a finished response."""
    seq = 0

    def sse(kind: str, **data: Any) -> bytes:
        nonlocal seq
        seq += 1
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq - 1, **data})}\n\n".encode()

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    yield sse("response.created", response=pending)
    yield sse("response.in_progress", response=pending)
    for i, item in enumerate(response["output"]):
        ids = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            part = item["content"][0]
            yield sse("response.output_item.added", output_index=i,
                      item={**item, "status": "in_progress", "content": []})
            yield sse("response.content_part.added", **ids, content_index=0, part={**part, "text": ""})
            yield sse("response.output_text.delta", **ids, content_index=0, delta=part["text"], logprobs=[])
            yield sse("response.output_text.done", **ids, content_index=0, text=part["text"], logprobs=[])
            yield sse("response.content_part.done", **ids, content_index=0, part=part)
        elif item["type"] == "function_call":
            yield sse("response.output_item.added", output_index=i,
                      item={**item, "status": "in_progress", "arguments": ""})
            yield sse("response.function_call_arguments.delta", **ids, delta=item["arguments"])
            yield sse("response.function_call_arguments.done", **ids, name=item["name"], arguments=item["arguments"])
        else:  # custom_tool_call
            yield sse("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "input": ""})
            yield sse("response.custom_tool_call_input.delta", **ids, delta=item["input"])
            yield sse("response.custom_tool_call_input.done", **ids, input=item["input"])
        yield sse("response.output_item.done", output_index=i, item=item)
    yield sse("response.incomplete" if response["status"] == "incomplete" else "response.completed",
              response=response)
