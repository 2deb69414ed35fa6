"""What a rollout runner and a harness share: client settings, limits, the episode record (the shell seam
the built-in harness runs against is `appliance.seams.Shell`: a real sandbox in production, `FakeShell` in tests).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appliance.config import HarnessSettings


@dataclass(slots=True)
class ClientConfig:
    """Where and how the harness asks for completions: in production, the proxy's per-rollout route."""

    base_url: str  # up to and including /v1, e.g. http://127.0.0.1:8200/r/<token>/v1
    api_key: str = "appliance"
    model: str = "policy"
    temperature: float = 0.7
    max_tokens: int = 384  # per call; the episode's token budget can lower it
    request_timeout_s: float = 300.0  # one HTTP request, generation included
    native_tools: bool = False  # advertise bash/submit as OpenAI tools (the engine needs a tool-call parser)
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request (top_p, seed, ...)
    transport: Any = None  # an httpx transport; tests hand in ScriptedPolicy's, production leaves None

    @classmethod
    def from_settings(cls, h: HarnessSettings, base_url: str, api_key: str, model: str = "policy") -> ClientConfig:
        # include_stop_str_in_output keeps the fence in the text, so the next prompt re-renders exactly
        # what was sampled and the calls still merge into one sequence.
        extra = {"stop": list(h.stop), "include_stop_str_in_output": True} if h.stop else {}
        return cls(base_url, api_key, model, temperature=h.temperature, max_tokens=h.max_tokens_per_call,
                   native_tools=h.native_tools, extra_body=extra)


@dataclass(slots=True)
class Limits:
    max_turns: int = 10  # model calls
    max_completion_tokens: int = 4096  # summed over the episode
    wall_time_s: float = 600.0  # the agent's own time: waiting out an engine 503 does not count
    command_timeout_s: float = 60.0
    observation_chars: int = 2000  # longer command output keeps its head and tail
    engine_wait_s: float = 3600.0  # longest wait for an engine that answers 503 (training, syncing)
    max_repeats: int = 2  # turns in a row that repeat the one before (same reply, same exit code); 0: no limit
    repeat_note: bool = False  # a repeated failing command's observation says it was repeated

    @classmethod
    def from_settings(cls, h: HarnessSettings) -> Limits:
        return cls(h.max_turns, h.max_completion_tokens, h.wall_time_s, h.command_timeout_s,
                   h.observation_chars, h.engine_wait_s, h.max_repeats, h.repeat_note)


_OVERFLOW = ("context length", "context_length", "maximum context", "too long", "prompt is too long")


def says_context_overflow(text: str) -> bool:
    """An engine's refusal text says prompt and max_tokens outgrew its context (vLLM's 400, and the like)."""
    return any(s in text.lower() for s in _OVERFLOW)


class EndReason(StrEnum):
    SUBMITTED = "submitted"  # the agent said it is done; the verifier decides success
    TURN_LIMIT = "turn_limit"
    TOKEN_LIMIT = "token_limit"
    TIME_LIMIT = "time_limit"
    CONTEXT_OVERFLOW = "context_overflow"  # the conversation outgrew the engine's context
    REPEATING = "repeating"  # the agent repeated its last turn (same reply, same exit code) too often in a row
    MODEL_ERROR = "model_error"  # the engine or proxy failed: an infra error, not the policy's doing
    SANDBOX_ERROR = "sandbox_error"  # the sandbox died: an infra error


@dataclass(slots=True)
class Episode:
    """What one harness run did, as the harness saw it (the exact tokens are the proxy's record)."""

    end_reason: EndReason
    turns: int  # model calls answered
    messages: list[dict[str, Any]]  # the conversation as sent, plus the last answer
    completion_tokens: int = 0
    commands: int = 0  # commands run in the shell
    parse_errors: int = 0  # answers with no usable action, fed back to the model
    elapsed_s: float = 0.0  # wall time, engine waits included
    engine_wait_s: float = 0.0
    error: str | None = None  # the cause, for model_error and sandbox_error
    answer: str = ""  # the text the agent submitted with (a question task's answer), DONE left out

    @property
    def infra_error(self) -> bool:
        return self.end_reason in (EndReason.MODEL_ERROR, EndReason.SANDBOX_ERROR)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
