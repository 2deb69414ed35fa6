"""A scripted engine behind vLLM's HTTP shape that answers in a model family's tool-call form.

`ToolEngine` serves `/v1/chat/completions` (streamed or not) and `/tokenize` like vLLM with
`--enable-auto-tool-choice --tool-call-parser xlam` over the bundled template: the prompt ids are the
char-level rendering of `appliance.testing.policy.chatml_ids`, a reply's tool calls are sampled as
`<tool_call>[{"name": ..., "arguments": {...}}]</tool_call>` and come back parsed into `tool_calls`
(finish_reason "tool_calls"), and every answer carries `prompt_token_ids`, `token_ids` and one logprob per
id. It answers from a script of `Reply`s in order (a harness's requests need not extend each other: side
calls and sub-agents do not), and keeps what it answered (`answered`: request, prompt ids, completion
ids) so a test can compare the proxy's rows with what the engine saw and sampled, id for id.

A reply's `expect`, when set, must occur in the request's last message; a request past the script, or one
that misses its `expect`, is answered 500 with the reason and kept in `failures`.

`side` answers a harness's side calls (a title, a summary) without spending the script: a request whose
first message contains one of its keys gets that key's text, and is kept in `side_answered`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from appliance.schemas import EngineState
from appliance.testing.policy import Reply, chatml_completion_ids, chatml_ids


@dataclass(slots=True)
class Answered:
    request: dict[str, Any]
    prompt_ids: list[int]
    completion_ids: list[int]


def _text(content: Any) -> str:
    """A message's content as the template prints it: parts' text joined (Anthropic and Responses
    translations hand lists of parts)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def prompt_ids_of(messages: list[dict[str, Any]], tools: list[Any] | None) -> list[int]:
    plain: list[Mapping[str, Any]] = [{**m, "content": _text(m.get("content"))} for m in messages]
    return chatml_ids(plain, tools)


def _detok(ids: list[int]) -> list[str]:
    return [chr(i - 3) if i > 2 else "" for i in ids]


class ToolEngine:
    """The script and its record; `app()` serves it, `serving(url)` is the `ServingEngine` a proxy takes."""

    def __init__(self, script: list[Reply | str], *, side: dict[str, str] | None = None,
                 policy_version: int = 0) -> None:
        self.script = [Reply(content=s) if isinstance(s, str) else s for s in script]
        self.side = side or {}
        self.side_answered: list[Answered] = []
        self.policy_version = policy_version
        self.answered: list[Answered] = []
        self.tokenized: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def _next(self, body: dict[str, Any]) -> tuple[Reply | None, str]:
        first = _text((body.get("messages") or [{}])[0].get("content"))
        for key, text in self.side.items():
            if key in first:
                with self._lock:
                    self.side_answered.append(Answered(body, [], []))
                    return Reply(content=text), f"side{len(self.side_answered) - 1}"
        with self._lock:
            step = len(self.answered)
            if step >= len(self.script):
                why = f"request {step + 1} but the script has {len(self.script)} replies; " \
                      f"last message: {str(body.get('messages', [])[-1:])[:300]}"
                self.failures.append(why)
                return None, why
            reply = self.script[step]
            last = body.get("messages", [{}])[-1]
            if reply.expect is not None and reply.expect not in _text(last.get("content")) + json.dumps(last):
                why = f"request {step + 1}: expected {reply.expect!r} in the last message, got {last!r}"
                self.failures.append(why)
                return None, why
            self.answered.append(Answered(body, [], []))  # filled below; holds the step
            return reply, str(step)

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        reply, step_or_why = self._next(body)
        if reply is None:
            return JSONResponse({"error": {"message": step_or_why, "type": "BadRequestError", "code": 500}}, 500)
        side = step_or_why.startswith("side")
        step = int(step_or_why.removeprefix("side"))
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"chatcmpl-tool-{step}{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)]
        prompt = prompt_ids_of(body["messages"], body.get("tools"))
        completion = chatml_completion_ids(message)
        (self.side_answered if side else self.answered)[step] = Answered(body, prompt, completion)
        finish = "tool_calls" if reply.tool_calls else reply.finish_reason
        lps = [{"token": t, "logprob": -0.5, "bytes": list(t.encode()), "top_logprobs": []} for t in _detok(completion)]
        base = {"id": f"chatcmpl-{step_or_why}", "created": 0, "model": body.get("model")}
        if not reply.tool_calls and not message["content"]:
            message["content"] = ""
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "prompt_token_ids": prompt, "choices": [{
                "index": 0, "message": {**message, "tool_calls": message.get("tool_calls", [])},
                "logprobs": {"content": lps}, "finish_reason": finish, "token_ids": completion}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
                          "total_tokens": len(prompt) + len(completion)}})

        def chunk(choice: dict[str, Any], **extra: Any) -> bytes:
            return ("data: " + json.dumps({**base, "object": "chat.completion.chunk",
                                           "choices": [{"index": 0, "logprobs": None, "finish_reason": None,
                                                        **choice}], **extra}) + "\n\n").encode()

        n_text = len(reply.content or "")

        def events() -> Any:
            yield chunk({"delta": {"role": "assistant", "content": ""}}, prompt_token_ids=prompt)
            for i in range(n_text):  # one token per character, as vLLM streams text
                yield chunk({"delta": {"content": reply.content[i]}, "logprobs": {"content": [lps[i]]},  # type: ignore[index]
                             "token_ids": [completion[i]]})
            # the parser holds the call's tokens back and sends each call once it is read, as vLLM's xlam does
            rest = len(completion) - 1
            if reply.tool_calls:
                yield chunk({"delta": {"tool_calls": [{**c, "index": i} for i, c in enumerate(message["tool_calls"])]},
                             "logprobs": {"content": lps[n_text:rest]}, "token_ids": completion[n_text:rest]})
            yield chunk({"delta": {}, "logprobs": {"content": lps[rest:]}, "token_ids": completion[rest:],
                         "finish_reason": finish})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def tokenize(self, request: Request) -> Response:
        body = await request.json()
        self.tokenized.append(body)
        ids = prompt_ids_of(body["messages"], body.get("tools")) if "messages" in body \
            else [ord(c) + 3 for c in body.get("prompt", "")]
        return JSONResponse({"count": len(ids), "max_model_len": 32768, "tokens": ids})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                 Route("/tokenize", self.tokenize, methods=["POST"])])

    def serving(self, base_url: str) -> ScriptedServing:
        return ScriptedServing(base_url, self.policy_version)

    def assert_done(self) -> None:
        assert not self.failures, self.failures[0]
        assert len(self.answered) == len(self.script), \
            f"the harness stopped after {len(self.answered)} of {len(self.script)} scripted replies"


class ScriptedServing:
    """`ServingEngine` for a server running `ToolEngine.app()`: always SERVING."""

    def __init__(self, base_url: str, policy_version: int = 0) -> None:
        self.base_url, self.policy_version, self.state = base_url, policy_version, EngineState.SERVING

    def model_name(self) -> str:
        return "policy"

    def try_admit(self) -> bool:
        return True

    def release(self) -> None:
        pass
