"""Typed records that cross module boundaries, their enums, and the allowed state transitions.

The store enforces the transition tables: a status change that is not listed here is refused with a
`TransitionError`, so a bug or a race can never move a rollout from `finished` back to `running`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from appliance.errors import TransitionError
from appliance.schemas.report import CapabilityReport as CapabilityReport  # re-exported: records live here
from appliance.schemas.report import Cells as Cells


def now() -> float:
    return time.time()


class RunStatus(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    DONE = "done"
    FAILED = "failed"


class IterationStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Phase(StrEnum):
    """The phases of one loop iteration, in order."""

    SYNTHESIZE = "synthesize"
    VALIDATE = "validate"
    PRACTISE = "practise"
    TRAIN = "train"
    EVALUATE = "evaluate"
    DIAGNOSE = "diagnose"
    DONE = "done"


class TaskStatus(StrEnum):
    PROPOSED = "proposed"
    VALID = "valid"  # passed agent-free validation
    LEARNABLE = "learnable"  # inside the learnable band of the current policy
    TOO_EASY = "too_easy"
    TOO_HARD = "too_hard"
    REJECTED = "rejected"  # failed agent-free validation; reason stored


class Split(StrEnum):
    TRAIN = "train"
    HELDOUT = "heldout"
    DEV = "dev"  # the transfer dev set (appliance/tasks/devset): evaluated, never trained on, like heldout


class RolloutStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"  # outcome and reward set


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"  # wrong result or bad format: the policy's doing, trained on
    TRUNCATED = "truncated"  # turn limit or context overflow: the policy's doing, trained on
    INFRA_ERROR = "infra_error"  # the machine's doing: excluded from loss and baseline


class FailureMode(StrEnum):
    """Why a finished rollout did not succeed. `rollouts.error` stores it as "<mode>: <detail>" (e.g.
    "turn_limit: after 8 turns", "infra: sandbox died"): `reason` writes that text, `read` reads it back,
    so no module parses the text itself. The values are the stored text: old stores read the same."""

    WRONG_ANSWER = "wrong_answer"  # Outcome.FAILURE: the verifier failed the workspace
    FORMAT_ERROR = "format_error"  # Outcome.FAILURE: no command ran, every reply failed to parse
    VERIFIER_TIMEOUT = "verifier_timeout"  # Outcome.FAILURE: what the agent left made the verifier hang
    TURN_LIMIT = "turn_limit"  # Outcome.TRUNCATED, as are the next four
    TOKEN_LIMIT = "token_limit"
    TIMEOUT = "timeout"  # the harness's wall-time limit
    CONTEXT_OVERFLOW = "context_overflow"
    REPEATING = "repeating"  # the built-in agent sent the same reply to the same result again and again
    INFRA = "infra"  # Outcome.INFRA_ERROR: the detail is the machine's cause

    def reason(self, detail: str) -> str:
        """The text stored in `rollouts.error` for this mode."""
        return f"{self.value}: {detail}"

    @classmethod
    def read(cls, error: str | None) -> tuple[FailureMode | None, str]:
        """A stored `rollouts.error` read back: the mode it starts with and the detail after "<mode>:";
        (None, the whole text) when it starts with no mode (a success's tampering note, no error)."""
        head, _, detail = (error or "").partition(":")
        if head.strip() in cls._value2member_map_:
            return cls(head.strip()), detail.strip()
        return None, (error or "").strip()


class EngineState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    SERVING = "serving"
    DRAINING = "draining"
    SLEEPING = "sleeping"
    SYNCING = "syncing"
    WAKING = "waking"
    CANARY = "canary"
    FAILED = "failed"


RUN_TRANSITIONS: dict[str, set[str]] = {
    RunStatus.RUNNING: {RunStatus.PAUSED, RunStatus.STOPPED, RunStatus.DONE, RunStatus.FAILED},
    RunStatus.PAUSED: {RunStatus.RUNNING, RunStatus.STOPPED},
    RunStatus.STOPPED: {RunStatus.RUNNING},  # `appliance run` continues a stopped run
    RunStatus.FAILED: {RunStatus.RUNNING},  # ... and a failed one, after the cause is fixed
    RunStatus.DONE: set(),
}

ITERATION_TRANSITIONS: dict[str, set[str]] = {
    IterationStatus.RUNNING: {IterationStatus.DONE, IterationStatus.FAILED},
    IterationStatus.FAILED: {IterationStatus.RUNNING},
    IterationStatus.DONE: set(),
}

ROLLOUT_TRANSITIONS: dict[str, set[str]] = {
    RolloutStatus.PENDING: {RolloutStatus.RUNNING, RolloutStatus.FINISHED},
    # running -> pending: a crash mid-episode; the restarted loop runs the rollout again.
    RolloutStatus.RUNNING: {RolloutStatus.FINISHED, RolloutStatus.PENDING},
    RolloutStatus.FINISHED: set(),
}

TASK_TRANSITIONS: dict[str, set[str]] = {
    TaskStatus.PROPOSED: {TaskStatus.VALID, TaskStatus.REJECTED},
    TaskStatus.VALID: {TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD},
    # the policy moves: a task can enter or leave the learnable band at every agent-based validation
    TaskStatus.LEARNABLE: {TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD},
    TaskStatus.TOO_EASY: {TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD},
    TaskStatus.TOO_HARD: {TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD},
    TaskStatus.REJECTED: set(),
}

ENGINE_TRANSITIONS: dict[str, set[str]] = {
    EngineState.STOPPED: {EngineState.STARTING},
    EngineState.STARTING: {EngineState.CANARY, EngineState.SERVING, EngineState.FAILED, EngineState.STOPPED},
    EngineState.SERVING: {EngineState.DRAINING, EngineState.FAILED, EngineState.STOPPED},
    EngineState.DRAINING: {EngineState.SLEEPING, EngineState.FAILED, EngineState.STOPPED},
    EngineState.SLEEPING: {EngineState.SYNCING, EngineState.WAKING, EngineState.FAILED, EngineState.STOPPED},
    EngineState.SYNCING: {EngineState.WAKING, EngineState.FAILED, EngineState.STOPPED},
    EngineState.WAKING: {EngineState.CANARY, EngineState.FAILED, EngineState.STOPPED},
    EngineState.CANARY: {EngineState.SERVING, EngineState.SYNCING, EngineState.FAILED, EngineState.STOPPED},
    EngineState.FAILED: {EngineState.STARTING, EngineState.STOPPED},
}


def check_transition(kind: str, table: dict[str, set[str]], old: str, new: str) -> None:
    if new not in table.get(old, set()):
        allowed = ", ".join(sorted(table.get(old, set()))) or "none (final state)"
        raise TransitionError(
            f"{kind} cannot go from {old!r} to {new!r}",
            f"from {old!r} a {kind} may go to: {allowed}",
        )


@dataclass(slots=True)
class Run:
    id: str
    status: RunStatus
    config: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(slots=True)
class Iteration:
    id: int
    run_id: str
    index: int
    phase: Phase
    status: IterationStatus
    policy_version: int
    started_at: float
    finished_at: float | None = None
    error: str | None = None


@dataclass(slots=True)
class Task:
    id: str
    run_id: str | None
    family: str
    difficulty: int
    source: str  # "procedural", "self_proposed" or "user"
    split: Split
    status: TaskStatus
    spec: dict[str, Any]  # the task format (see appliance.tasks)
    reject_reason: str | None = None
    pass_rate: float | None = None
    created_at: float = field(default_factory=now)
    iteration: int | None = None  # the loop iteration it was made for; None: held-out, imported, warm-start pool


@dataclass(slots=True)
class Rollout:
    id: str
    run_id: str | None
    task_id: str | None
    group_id: str | None
    iteration: int | None
    harness: str
    policy_version: int
    status: RolloutStatus
    purpose: str = "train"  # train, validate, eval, debug
    outcome: Outcome | None = None
    reward: float | None = None
    error: str | None = None  # the cause of an infra error or failure
    turns: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    created_at: float = field(default_factory=now)


@dataclass(slots=True)
class ModelCall:
    """One request that crossed the model boundary, with the exact tokens the engine saw and sampled."""

    id: int | None
    rollout_id: str
    seq: int  # order of the call within its rollout
    status: str  # "ok", or "error" with `error` set
    request: dict[str, Any]
    response: dict[str, Any] | None
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # one per completion id
    policy_version: int
    latency_s: float
    error: str | None = None
    created_at: float = field(default_factory=now)
    temperature: float | None = None  # the sampling temperature the engine used (None: not recorded, 1.0)


@dataclass(slots=True)
class Sample:
    """One training sequence: a branch of a rollout's prefix tree."""

    rollout_id: str
    group_id: str | None
    branch: int
    token_ids: list[int]
    mask: list[int]  # 1 on engine-sampled tokens (trained), 0 on prompt/tool tokens
    logprobs: list[float]  # engine logprob on sampled positions, 0.0 elsewhere
    policy_version: int  # (its reward is its rollout's, stored there alone: `training.advantages` reads it)
    advantage: float | None = None
    temperature: float = 1.0  # the sampling temperature of its trained tokens (the trainer divides logits by it)
    # per-token advantages (turn-level credit: training.method=ppo or turn_credit); None: `advantage` on every
    # token. Set by the trainer for one phase, never stored.
    token_advantages: list[float] | None = field(default=None, metadata={"stored": False})


@dataclass(slots=True)
class Event:
    kind: str  # phase, engine, error, info, ...
    message: str
    run_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    created_at: float = field(default_factory=now)
    id: int | None = None


@dataclass(slots=True)
class Checkpoint:
    """Trained weights the engine can load: a peft adapter folder (`lora`) or a safetensors HF folder (`full`)."""

    run_id: str | None
    policy_version: int
    iteration: int | None
    kind: str  # "lora" or "full"
    path: str
    metrics: dict[str, float] = field(default_factory=dict)
    created_at: float = field(default_factory=now)
    id: int | None = None


class ControlCommand(StrEnum):
    """What a person can ask of a running loop (from the TUI or `appliance pause|resume|step|stop`)."""

    PAUSE = "pause"  # start no new rollout (those in flight finish), then wait (run status -> paused)
    RESUME = "resume"  # paused -> running
    STEP = "step"  # while paused: run the next phase, then pause again
    STOP_AFTER_ITERATION = "stop_after_iteration"  # finish the current iteration, then stop
    STOP_NOW = "stop_now"  # stop at the phase's next safe point; the process ends, `appliance run` continues


class ControlStatus(StrEnum):
    PENDING = "pending"  # written by the requester, not yet seen by the loop
    DONE = "done"  # the loop acted on it; `result` says what it did
    REFUSED = "refused"  # the loop could not act on it; `result` says why
    EXPIRED = "expired"  # no loop answered before the requester gave up


@dataclass(slots=True)
class Heartbeat:
    """The live loop's last beat (`appliance.control.Steering`): which run, which process, when, and the
    progress of the phase in flight (None between phases)."""

    run_id: str
    pid: int
    started_at: float
    beat_at: float
    progress: dict[str, Any] | None = None

    def age_s(self, at: float) -> float:
        return max(0.0, at - self.beat_at)


@dataclass(slots=True)
class Control:
    """One control request and, once the loop has answered, its result."""

    id: int
    run_id: str
    command: ControlCommand
    status: ControlStatus
    result: str | None
    created_at: float
    acked_at: float | None = None


@dataclass(slots=True)
class Demonstration:
    """A verified conversation that solves a task, tokenized for SFT (training data only, never an RL sample).

    `origin` is "reference" (the task's reference solution run through the built-in harness's formatting),
    "hindsight" (a successful rollout of a hinted task, relabelled as a demonstration of the unhinted
    request) or "success" (a successful rollout kept for later iterations). The ids come from the served
    model's chat template, so unlike RL samples they are
    re-tokenized text: they never enter a GRPO batch or the `retokenized_tokens` count. A template that is
    not prefix-stable gives one sequence per turn (`appliance.serving.template`): `token_ids` holds them one
    after another, `lengths` says where each ends (empty: one sequence).
    """

    run_id: str | None
    task_id: str | None
    family: str
    difficulty: int
    origin: str  # "reference" | "hindsight" | "success"
    messages: list[dict[str, Any]]
    token_ids: list[int]
    mask: list[int]  # 1 on the assistant's tokens (trained), 0 elsewhere
    digest: str  # sha256 of the messages: one row per distinct conversation and run
    iteration: int | None = None
    lengths: list[int] = field(default_factory=list)
    id: int | None = None
    created_at: float = field(default_factory=now)

    @classmethod
    def of_sequences(cls, sequences: list[tuple[list[int], list[int]]], **fields: Any) -> Demonstration:
        ids = [t for seq, _ in sequences for t in seq]
        mask = [m for _, seq_mask in sequences for m in seq_mask]
        lengths = [len(seq) for seq, _ in sequences] if len(sequences) > 1 else []
        return cls(token_ids=ids, mask=mask, lengths=lengths, **fields)

    def sequences(self) -> list[tuple[list[int], list[int]]]:
        out, start = [], 0
        for n in self.lengths or [len(self.token_ids)]:
            out.append((self.token_ids[start:start + n], self.mask[start:start + n]))
            start += n
        return out

    def to_samples(self) -> list[Sample]:
        """The SFT samples, one per sequence (`appliance.training.sft` reads only token_ids and mask)."""
        name = f"demo:{self.id if self.id is not None else self.digest[:12]}"
        return [Sample(name, None, k, list(ids), list(mask), [0.0] * len(ids), -1)
                for k, (ids, mask) in enumerate(self.sequences())]


@dataclass(slots=True)
class ExecResult:
    """One command's outcome in a sandbox (output capped at `sandbox.output_limit_bytes`, the rest dropped)."""

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
