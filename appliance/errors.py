"""The appliance's errors: every one says what was wrong and how to fix it.

A user mistake (bad config, missing model, Podman not set up) is raised as an `ApplianceError` with a
`hint`; the CLI prints message and hint to stderr and exits non-zero, never a traceback.
"""

from __future__ import annotations


class ApplianceError(Exception):
    """Root of every error the appliance raises on purpose."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class ConfigError(ApplianceError):
    """appliance.toml or an APPLIANCE_* variable holds an unknown key or a bad value."""


class StoreError(ApplianceError):
    """The SQLite store cannot be opened, migrated, or was asked for something it does not hold."""


class TransitionError(StoreError):
    """A state change that the state machine of a run, iteration, rollout or engine does not allow."""


class NotFoundError(StoreError):
    """A row that was asked for by id does not exist."""


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than the busy timeout; nothing was written."""


class StoreFull(StoreBusy):
    """The disk holding the store is full: the write was rolled back, nothing was written. Like a busy store
    it costs no attempt of a phase: the loop waits, and goes on by itself once space is freed."""


class DiskFull(ApplianceError):
    """A checkpoint could not be written: its disk is full. Not a failed sync (the run must not go on without
    learning): the phase fails, and after `loop.phase_attempts` the run stops with this message."""


class LoopLocked(StoreError):
    """Another process runs the loop on this store already (its pid is in the message)."""


class SandboxError(ApplianceError):
    """Podman could not start, run or clean up a sandbox."""


class SandboxStorageFull(SandboxError):
    """The disk under Podman's storage is full, so no sandbox can start. Not one rollout's infra error (every
    rollout would fail the same way, and a practice round of them would teach nothing): the rollout goes back
    to pending, the phase fails, and after `loop.phase_attempts` the run stops with this message."""


class SandboxNotClean(SandboxError):
    """Processes or files that task code or an agent left outlived a kill and a wipe.

    The sandbox is discarded. This is the doing of whatever ran in it (a fork bomb that will not die), not
    the machine's: callers judge it as that task's or that agent's failure, never as an infra error."""


class EngineError(ApplianceError):
    """The inference engine failed to start, answer, sync weights or pass its canary."""


class SetupError(ApplianceError):
    """A one-time set-up step (model conversion, image build) failed."""


class TrajectoryError(ApplianceError):
    """A rollout's recorded model calls break the contract the prefix-tree builder relies on."""


class EvaluationError(ApplianceError):
    """An evaluation has no evidence: every rollout it ran ended in an infra error."""


class ControlError(ApplianceError):
    """A control request that cannot be made, was refused by the loop, or that no loop answered."""


class TaskFormatError(ApplianceError):
    """A task file or directory does not follow the task format."""


class TrainingError(ApplianceError):
    """The trainer could not load the policy, a checkpoint, or train on the samples it was given."""


class WorkerError(ApplianceError):
    """The multi-process trainer's workers failed (non-zero exit) or left no result."""


class ExportError(ApplianceError):
    """The version cannot be exported to this destination."""


class Interrupted(Exception):
    """The appliance is shutting down (SIGTERM, Ctrl-C): the phase in flight stops without a result.

    Not an ApplianceError on purpose: nothing is wrong, and nothing the shutdown broke (engine stopped,
    sandboxes swept) may be recorded as an outcome. The interrupted work is redone at the next start.
    """
