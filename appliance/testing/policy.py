"""Harness and task fakes: a scripted OpenAI-compatible policy (with char-level token ids as the proxy
would record them) and a scripted prompt -> text policy for self-proposal."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from appliance.harness.base import ClientConfig
from appliance.schemas import ModelCall

IM_START, IM_END = 1, 2  # the char-level tokenizer's special tokens; text characters are ord(c) + 3


class ScriptDivergence(AssertionError):
    """The harness talked to ScriptedPolicy or FakeShell in a way the script did not foresee."""


@dataclass
class Reply:
    """One scripted answer of `ScriptedPolicy` (a plain string in a script is `Reply(content=...)`)."""

    content: str | None = None
    tool_calls: list[tuple[str, Any]] | None = None  # (name, arguments dict or raw string)
    expect: str | None = None  # must occur in a message the request added since the previous reply
    status: int = 200  # anything else answers with `error` as the body
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


def _char_ids(text: str) -> list[int]:
    return [ord(c) + 3 for c in text]


def chatml_completion_ids(message: Mapping[str, Any]) -> list[int]:
    """What the engine 'sampled' for an assistant message: its text, tool calls as the template writes
    them, and <|im_end|>."""
    text = message.get("content") or ""
    if message.get("tool_calls"):
        calls = []
        for c in message["tool_calls"]:
            fn = c["function"]
            args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
            calls.append('{"name": "' + fn["name"] + '", "arguments": ' + args + "}")
        text += "<tool_call>[" + ", ".join(calls) + "]</tool_call>"
    return _char_ids(text) + [IM_END]


def chatml_ids(messages: list[Mapping[str, Any]], tools: list[Any] | None = None) -> list[int]:
    """A char-level mirror of appliance/serving/chat_template.jinja with the generation prompt: stands in
    for the engine's prompt ids so harness tests can check that a conversation's prompts extend each
    other (a real tokenizer behaves the same whenever the text re-renders identically)."""
    ids = [IM_START] + _char_ids("system\n")
    first_system = bool(messages) and messages[0]["role"] == "system"
    ids += _char_ids(messages[0]["content"] if first_system else "You are a helpful AI assistant named SmolLM, "
                     "trained by Hugging Face")
    if tools:
        ids += _char_ids("\n\nYou can call tools. The tools you have:\n<tools>\n" + "".join(
            json.dumps(t.get("function", t)) + "\n" for t in tools) + "</tools>")
    ids += [IM_END] + _char_ids("\n")
    for m in messages[1:] if first_system else messages:
        if m["role"] == "assistant":
            ids += [IM_START] + _char_ids("assistant\n") + chatml_completion_ids(m) + _char_ids("\n")
        elif m["role"] == "tool":
            ids += [IM_START] + _char_ids(f"user\n<tool_response>\n{m['content']}\n</tool_response>") + [IM_END]
            ids += _char_ids("\n")
        else:
            ids += [IM_START] + _char_ids(f"{m['role']}\n{m['content']}") + [IM_END] + _char_ids("\n")
    return ids + [IM_START] + _char_ids("assistant\n")


class ScriptedPolicy:
    """An OpenAI chat-completions endpoint, in process (an httpx transport), that replays a script.

    It fails loudly (raises `ScriptDivergence`, and `assert_done` raises it again in case the harness
    swallowed it) when a request does not extend the previous request plus the reply it got, verbatim;
    when a reply's `expect` text is missing from the messages the request added; when the harness asks
    more often than the script answers. It records each answered call as the proxy would (`calls`:
    ModelCall with char-level ids), so a test can rebuild the rollout's training samples.
    """

    def __init__(self, script: list[Reply | str], *, rollout_id: str = "scripted", policy_version: int = 0) -> None:
        self.script = [Reply(content=s) if isinstance(s, str) else s for s in script]
        self.rollout_id, self.policy_version = rollout_id, policy_version
        self.requests: list[dict[str, Any]] = []
        self.calls: list[ModelCall] = []
        self.failures: list[str] = []
        self._sent: list[dict[str, Any]] = []  # the last request's messages plus the reply to it
        self.transport = httpx.MockTransport(self._handle)

    def client_config(self, **overrides: Any) -> ClientConfig:
        return ClientConfig(base_url="http://scripted.invalid/v1", transport=self.transport, **overrides)

    def _fail(self, message: str) -> None:
        self.failures.append(message)
        raise ScriptDivergence(message)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/v1/chat/completions"):  # also under a proxy route /r/<token>
            self._fail(f"ScriptedPolicy only serves /v1/chat/completions, got {request.url.path}")
        body = json.loads(request.content)
        step = len(self.requests)
        self.requests.append(body)
        messages = body["messages"]
        if step >= len(self.script):
            self._fail(f"request {step + 1} but the script has {len(self.script)} replies; "
                       f"last message: {messages[-1]!r}")
        for i, (want, got) in enumerate(zip(self._sent, messages + [None] * len(self._sent))):
            if want != got:
                self._fail(f"request {step + 1} rewrote message {i}: expected {want!r}, got {got!r}")
        reply = self.script[step]
        new = messages[len(self._sent):] or messages[-1:]
        if reply.expect is not None and not any(reply.expect in str(m.get("content")) for m in new):
            self._fail(f"request {step + 1}: expected {reply.expect!r} in the new messages, got {new!r}")
        if reply.status != 200:
            return httpx.Response(reply.status, headers=reply.headers, text=reply.error)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{step}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)]
        prompt_ids, completion_ids = chatml_ids(messages, body.get("tools")), chatml_completion_ids(message)
        logprobs = [-0.5] * len(completion_ids)
        self.calls.append(ModelCall(None, self.rollout_id, step, "ok", body, None, prompt_ids, completion_ids,
                                    logprobs, self.policy_version, 0.0))
        self._sent = messages + [message]
        return httpx.Response(200, json={
            "id": f"scripted-{step}", "object": "chat.completion", "model": body.get("model"),
            "prompt_token_ids": prompt_ids,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason,
                         "token_ids": completion_ids}],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids),
                      "total_tokens": len(prompt_ids) + len(completion_ids)},
        })

    def assert_done(self) -> None:
        if self.failures:
            raise ScriptDivergence(self.failures[0])
        if len(self.requests) < len(self.script):
            raise ScriptDivergence(f"the harness stopped after {len(self.requests)} of {len(self.script)} "
                                   f"scripted replies; next unused: {self.script[len(self.requests)]!r}")


class ScriptedText:
    """Answers prompts from a script, in order, and records them; a call past the script fails loudly."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def __call__(self, prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        if len(self.prompts) >= len(self.replies):
            raise ScriptDivergence(f"ScriptedText got call {len(self.prompts) + 1}, but only "
                                   f"{len(self.replies)} replies are scripted; prompt: {prompt[:200]!r}")
        self.prompts.append(prompt)
        return self.replies[len(self.prompts) - 1]

    def done(self) -> bool:
        return len(self.prompts) == len(self.replies)
