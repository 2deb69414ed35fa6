"""What the proxy reads from the engine's answers: their token ids and logprobs (`Tokens`), a stream's
chunks folded into one record, the fields it forced on stripped again, and whether vLLM aborted the call.

Anything the record cannot hold exactly raises RecordError; the proxy turns that into an error row.
"""

from __future__ import annotations

from typing import Any

from appliance.proxy.checks import CHAT, is_number

# what the engine adds because we ask for token ids; stripped unless the harness asked too
ID_FIELDS = ("prompt_token_ids", "prompt_text")


class Tokens:
    """Token ids and logprobs gathered from one response or a stream of chunks: one choice, index 0.

    Anything else (a second choice, a logprob that is not a number, ids and logprobs that do not pair
    up) raises RecordError: the checks refuse the requests that cause it, so it means the engine
    answered something the record cannot hold exactly, and the call becomes an error row.
    """

    __slots__ = ("prompt", "completion", "logprobs")

    def __init__(self) -> None:
        self.prompt: list[int] = []
        self.completion: list[int] = []
        self.logprobs: list[float] = []

    def take(self, kind: str, data: dict[str, Any]) -> None:
        if data.get("prompt_token_ids"):
            self.prompt = _ids(data["prompt_token_ids"], "prompt_token_ids")
        for choice in data.get("choices") or ():
            if choice.get("index", 0) != 0:
                raise RecordError(f"the engine answered choice {choice.get('index')!r}; one choice was asked for")
            if choice.get("prompt_token_ids"):
                self.prompt = _ids(choice["prompt_token_ids"], "prompt_token_ids")
            self.completion += _ids(choice.get("token_ids") or [], "token_ids")
            lp = choice.get("logprobs") or {}
            found = [c.get("logprob") for c in lp.get("content") or ()] if kind == CHAT \
                else list(lp.get("token_logprobs") or ())
            if not all(is_number(v) for v in found):
                raise RecordError("the engine's logprobs hold a value that is not a number")
            self.logprobs += found

    def check(self) -> None:
        """A finished answer: one logprob per completion id, or it is not the exact record training needs."""
        if len(self.completion) != len(self.logprobs):
            raise RecordError(f"the engine returned {len(self.completion)} completion ids but "
                              f"{len(self.logprobs)} logprobs")


class RecordError(Exception):
    pass


def _ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(type(i) is int for i in value):
        raise RecordError(f"the engine's {name} is not a list of integers")
    return value


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


def merged(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
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


class EngineAborted(Exception):
    pass


# vLLM ends a request it aborted (at /sleep, which the engine sends after a drain that timed out, or at a
# shutdown) with finish_reason "abort": the turn was cut short by the machine, not ended by the policy,
# so its row is an error (practice.engine_failed makes the rollout an infra error, out of the gradient)
ABORTED = 'engine aborted the call (finish_reason "abort": the engine went to sleep or shut down mid-generation)'


def aborted(data: dict[str, Any] | None) -> bool:
    """Did the engine abort this answer? `data`: a response, or a stream's chunks `_merged`."""
    if not data:
        return False
    if data.get("finish_reason") == "abort":
        return True
    return any(choice.get("finish_reason") == "abort" for choice in data.get("choices") or ())
