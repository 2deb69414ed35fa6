"""What the proxy lets through to the engine: bodies read within a byte limit, one sampled sequence per call.

The record the trainer reads must be exactly one sequence the engine sampled: the prompt's ids, the
completion's ids and one logprob per completion id. So every field that makes the engine return more
than one choice (`n`, `best_of`, beam search, a list of prompts), something other than a sampled
completion (`echo` glues the prompt in front of it, `prompt_logprobs` scores the prompt), or no prompt
ids at all (token-id and embedding prompts) is refused before the engine sees it, with the field named.
Types are checked strictly: JSON `true` is not the integer 1 here, although it is in Python.

Not covered: fields that change the sampling distribution within one choice (`logit_bias`, guided or
structured decoding, `allowed_token_ids`, `bad_words`) pass; the engine reports the logprobs it sampled
with, which may then differ from the trainer's unconstrained ones.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, TypeGuard

CHAT, COMPLETION = "chat", "completion"


class Refusal(Exception):
    """A call the proxy answers itself: status, message, error type, extra headers; `record` adds an error row."""

    def __init__(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None,
                 record: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers, self.record = status, message, kind, headers or {}, record

# field -> why it cannot cross the boundary (it changes what comes back beyond one sampled choice)
REFUSED = {
    "echo": "it returns the prompt as part of the completion",
    "prompt_logprobs": "it scores the prompt, which is not a sampled sequence",
    "use_beam_search": "beam search returns a searched sequence, not a sampled one",
    "prompt_embeds": "an embedded prompt has no token ids to record",
}
ONE_ONLY = ("n", "best_of")


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer: Python's bool is an int, JSON's true is not."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bad_request(message: str) -> Refusal:
    return Refusal(400, message, "invalid_request_error", record=True)


async def read_body(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> dict[str, Any]:
    """The JSON object of a request body, read as a stream and abandoned as soon as it passes `limit` bytes.

    A declared Content-Length over the limit is refused before anything is read; a chunked (or lying)
    body is counted as it arrives, so at most `limit` bytes of it are ever held.
    """
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large(f"request body of {declared} bytes exceeds proxy.max_request_bytes={limit}")
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(f"request body exceeds proxy.max_request_bytes={limit} (stopped reading at {size} bytes)")
        parts.append(chunk)
    try:
        body = json.loads(b"".join(parts))
    except ValueError as e:
        raise bad_request(f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def too_large(message: str) -> Refusal:
    # the rest of the body stays unread: the connection is closed rather than drained
    return Refusal(413, message, "invalid_request_error", {"Connection": "close"}, record=True)


def check_request(body: dict[str, Any], kind: str) -> None:
    """Refuse what would not come back as one exactly recordable sampled sequence (see the docstring)."""
    for key, why in REFUSED.items():
        if body.get(key) is not None and body[key] is not False:  # 0 == False, but prompt_logprobs=0 scores
            raise bad_request(f"`{key}` is not supported ({key}={body[key]!r}): {why}, and the proxy records "
                              "one sampled sequence per call; leave it out")
    for key in ONE_ONLY:
        value = body.get(key)
        if value is not None and not (is_int(value) and value == 1):
            raise bad_request(f"{key} must be 1, got {value!r}: the proxy records one completion per call; "
                              "send one request per completion instead")
    if kind == COMPLETION:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            shape = "a list" if isinstance(prompt, list) else type(prompt).__name__
            raise bad_request(f"`prompt` must be one string, got {shape}: the proxy records one prompt and one "
                              "completion per call (no batches, no token-id prompts); send one request per prompt")
        logprobs = body.get("logprobs")
        if logprobs is not None and not (is_int(logprobs) and logprobs >= 0):
            raise bad_request(f"logprobs must be a non-negative integer on /v1/completions, got {logprobs!r}")
    for key in ("stream", "return_token_ids") + (("logprobs",) if kind == CHAT else ()):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise bad_request(f"{key} must be true or false, got {body[key]!r}")
    for key in ("max_tokens", "max_completion_tokens", "top_logprobs"):
        value = body.get(key)
        if value is not None and not (is_int(value) and value >= (0 if key == "top_logprobs" else 1)):
            kind_of = "a non-negative" if key == "top_logprobs" else "a positive"
            raise bad_request(f"{key} must be {kind_of} integer, got {value!r}")
    if body.get("temperature") is not None and not is_number(body["temperature"]):
        raise bad_request(f"temperature must be a number, got {body['temperature']!r}")
