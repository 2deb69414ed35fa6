"""Bounded retries of the loop's phases: a phase that fails the same way at every tick stops the run.

A failed phase is retried at the next tick, because most failures are passing ones (an engine that was
restarting, a sandbox that did not come up). One that keeps failing is not going to pass by itself: after
`loop.phase_attempts` failed attempts in a row of one (iteration, phase) the run's status becomes failed,
and the run's events say why (the exception's type and message), so the TUI, `appliance status` and the
process's exit say what to fix instead of retrying every `tick_s` for ever. Any exception counts, a bug
(KeyError, a failed assertion) as much as an `ApplianceError`; `Interrupted` (a shutdown), any exception
raised once a shutdown began (SIGTERM, Ctrl-C, `appliance stop --now`: the teardown stops the engine under a
request in flight, which then ends in RemoteProtocolError) and `StoreBusy` (another process holds the
store's write lock: nothing can be written, the loop waits) are not failures of the phase and never reach
here (`Loop._tick` sorts them).

The count is the process's own, on purpose: restarting `appliance run` after fixing the cause continues
the failed run (`Loop.ensure_run`) with a fresh count, and a success resets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.errors import ApplianceError
from appliance.schemas import Event, IterationStatus, RunStatus
from appliance.store import Store


def describe(error: BaseException) -> str:
    """The cause as the run's events show it: an ApplianceError's message, else the exception's type and text."""
    if isinstance(error, ApplianceError):
        return error.message
    return f"{type(error).__name__}: {error}"


@dataclass
class Attempts:
    """Failed attempts in a row of one (iteration, phase); `limit` of them stop the run."""

    limit: int
    key: tuple[int, str] | None = None
    count: int = 0

    def succeeded(self) -> None:
        self.key, self.count = None, 0

    def failed(self, store: Store, run_id: str, iteration: int, phase: str, error: BaseException,
               log: Callable[[str], None] = print) -> bool:
        """Record a failed attempt (the iteration failed, an error event naming the cause); True when it was
        the last one allowed and the run is now failed."""
        key = (iteration, phase)
        self.count = self.count + 1 if key == self.key else 1
        self.key = key
        cause = describe(error)
        hint = error.hint if isinstance(error, ApplianceError) else ""
        store.set_iteration_status(run_id, iteration, IterationStatus.FAILED, error=cause)
        message = f"iteration {iteration} {phase} failed: {cause} (attempt {self.count} of {self.limit})"
        store.add_event(Event("error", message, run_id, {"iteration": iteration, "phase": phase, "hint": hint,
                                                         "attempt": self.count, "exception": type(error).__name__}))
        log(message)
        if self.count < self.limit or store.get_run(run_id).status != RunStatus.RUNNING:
            return False  # a paused run's step failed: the run waits for the user anyway
        store.set_run_status(run_id, RunStatus.FAILED)
        message = (f"run {run_id} failed: iteration {iteration} {phase} failed {self.count} times in a row, last "
                   f"with {cause}; fix the cause and `appliance run` continues the run"
                   + (f" (hint: {hint})" if hint else ""))
        store.add_event(Event("run", message, run_id, {"iteration": iteration, "phase": phase,
                                                       "exception": type(error).__name__}))
        log(message)
        return True
