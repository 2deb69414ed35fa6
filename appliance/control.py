"""Steering a running loop: pause, resume, step, stop after the iteration, stop now.

The TUI and `appliance pause|resume|step|stop` call `request`, which writes a pending row to the store's
`controls` table and waits until the loop answers it. A live loop keeps a heartbeat (`Steering`: a thread
of `appliance run` that beats about every second and answers the pending requests, whatever phase runs),
so a request is answered within a second or two; the answer says when it takes effect (a pause inside a
phase holds new rollouts back at its safe points while those in flight finish). Whether a loop is alive
is read from the heartbeat, not guessed from a timeout: with none (absent or stale) `request` queues
nothing and says so, and a request whose loop died while it waited is withdrawn (expired), so no loop
acts on it late; a loop that starts withdraws whatever was left pending before it.

The loop answers through `answer_pending`: each request the run's status allows (`ALLOWED`, the contract
both sides keep) is acknowledged DONE with the loop's answer (`ANSWERS[command]` unless the loop says
more) and done; any other is acknowledged REFUSED with the reason, which `request` raises as a
`ControlError`. Stand-ins for the loop in tests answer through `answer_pending` too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance.errors import ApplianceError, ControlError
from appliance.schemas import Control, ControlCommand, ControlStatus, Run, RunStatus
from appliance.store import Store

DEFAULT_TIMEOUT_S = 15.0  # an upper bound: a live loop answers within a beat or two
BEAT_S = 1.0  # how often the live loop beats and answers
LIVE_S = 10.0  # a heartbeat older than this is no loop's (a loaded 2-core machine may delay a beat by seconds)
NO_LOOP_HINT = ("is `appliance run` running against this store? Nothing is left queued; `appliance run` "
                "continues the run")
WITHDRAWN_HINT = ("is `appliance run` still running against this store? The request was withdrawn; "
                  "`appliance run` continues the run")

# The run statuses in which a command makes sense; anything else is refused before it reaches the loop.
ALLOWED: dict[ControlCommand, set[RunStatus]] = {
    ControlCommand.PAUSE: {RunStatus.RUNNING},
    ControlCommand.RESUME: {RunStatus.PAUSED},
    ControlCommand.STEP: {RunStatus.PAUSED},
    ControlCommand.STOP_AFTER_ITERATION: {RunStatus.RUNNING, RunStatus.PAUSED},
    ControlCommand.STOP_NOW: {RunStatus.RUNNING, RunStatus.PAUSED},
}

HINTS: dict[ControlCommand, str] = {
    ControlCommand.PAUSE: "the run is not running; `appliance resume` continues a paused run",
    ControlCommand.RESUME: "only a paused run can be resumed; `appliance run` continues a stopped or failed run",
    ControlCommand.STEP: "step runs one phase of a paused run: `appliance pause` first",
    ControlCommand.STOP_AFTER_ITERATION: "the run is not active; `appliance status` shows what it is doing",
    ControlCommand.STOP_NOW: "the run is not active; `appliance status` shows what it is doing",
}


# What the loop answers when it takes a command (the `controls.result` of a DONE request).
ANSWERS: dict[ControlCommand, str] = {
    ControlCommand.PAUSE: "paused",
    ControlCommand.RESUME: "running",
    ControlCommand.STEP: "running one phase, then paused again",
    ControlCommand.STOP_AFTER_ITERATION: "will stop at the end of this iteration",
    ControlCommand.STOP_NOW: "stopped between phases: `appliance run` ends; run it again to continue",
}


def resolve_run(store: Store, run_id: str | None = None) -> Run:
    """The run named, or the latest one; a clear error when the store holds none."""
    if run_id is not None:
        return store.get_run(run_id)
    run = store.latest_run()
    if run is None:
        raise ControlError("there is no run to control in this store",
                           "start one with `appliance run` (or point APPLIANCE_HOME at the running appliance)")
    return run


def check_allowed(run: Run, command: ControlCommand) -> None:
    if run.status not in ALLOWED[command]:
        allowed = ", ".join(sorted(ALLOWED[command]))
        raise ControlError(f"cannot {command} run {run.id!r}: it is {run.status} (needs: {allowed})", HINTS[command])


def loop_alive(store: Store, run_id: str, at: float | None = None) -> tuple[bool, str]:
    """Whether a live loop runs `run_id` by its heartbeat (or, with the beat late, by its process still holding
    the loop lock), and if not, why (for the error a person sees)."""
    beat = store.heartbeat()
    if beat is None:
        return False, "no `appliance run` keeps a heartbeat in this store"
    age = beat.age_s(time.time() if at is None else at)
    if age > LIVE_S and store.loop_holder() != beat.pid:
        return False, f"the last heartbeat (pid {beat.pid}) is {age:.0f} s old"
    # a late beat of the process that still holds the loop lock is a live loop's: a busy store (a write waits
    # up to BUSY_TIMEOUT_MS) or a starved core held the beat up
    if beat.run_id != run_id:
        return False, f"the live loop runs {beat.run_id!r}"
    return True, ""


def request(store: Store, command: ControlCommand | str, *, run_id: str | None = None,
            timeout_s: float = DEFAULT_TIMEOUT_S, wait: bool = True, poll_s: float = 0.1,
            sleep: Callable[[float], None] = time.sleep) -> Control:
    """Ask the live loop to act and (by default) wait for its answer; returns the answered request."""
    try:
        command = ControlCommand(command)
    except ValueError:
        raise ControlError(f"unknown control command {command!r}",
                           f"choose one of: {', '.join(c.value for c in ControlCommand)}") from None
    run = resolve_run(store, run_id)
    check_allowed(run, command)
    alive, why = loop_alive(store, run.id)
    if not alive:  # queued, it would wait for a loop that is not there, or be acted on by a later one
        raise ControlError(f"no loop is running run {run.id!r} to answer {command}: {why}", NO_LOOP_HINT)
    control = store.request_control(run.id, command)
    if not wait:
        return control
    deadline = time.monotonic() + timeout_s
    while control.status == ControlStatus.PENDING:
        alive, why = loop_alive(store, run.id)
        late = time.monotonic() >= deadline
        if not alive or late:
            said = why if not alive else f"its heartbeat is live but it did not answer within {timeout_s:g} s"
            if store.ack_control(control.id, f"withdrawn: {said}", status=ControlStatus.EXPIRED):
                raise ControlError(f"no loop answered the {command} request for run {run.id!r}: {said}",
                                   WITHDRAWN_HINT if not alive else "the request was withdrawn; `appliance "
                                   "status` shows the loop's heartbeat; try again")
        sleep(poll_s)
        control = store.get_control(control.id)
    if control.status == ControlStatus.REFUSED:
        raise ControlError(f"the loop refused {command}: {control.result}", "`appliance status` shows the run's state")
    return control


def answer_pending(store: Store, run_id: str, *, step: Callable[[], None],
                   stop_after_iteration: Callable[[], None], pause: Callable[[], str | None] | None = None,
                   stop_now: Callable[[], str | None] | None = None) -> list[Control]:
    """The loop's side: answer the run's pending requests in order; returns them answered.

    Pause and resume move `runs.status` (`pause`, when given, is called after the move and may return the
    answer: what the phase in flight does about it, as its next safe point reads the status); a step calls
    `step` (the run stays paused; the caller runs one phase); a stop after the iteration calls
    `stop_after_iteration` (the caller stops when the iteration ends); a stop now calls `stop_now` (the
    caller starts nothing more; it may return the answer) and moves the run to stopped, which ends
    `appliance run` as SIGTERM does. A loop without `stop_now` refuses it.
    The acknowledgement comes after the act, so a requester that sees DONE sees its effect too.
    """
    answered = []
    for control in store.pending_controls(run_id):
        status = store.get_run(run_id).status
        said: str | None = None
        if status not in ALLOWED[control.command]:
            store.ack_control(control.id, f"cannot {control.command} while the run is {status}",
                              status=ControlStatus.REFUSED)
        elif control.command == ControlCommand.STOP_NOW and stop_now is None:
            store.ack_control(control.id, "this loop stops only after an iteration (`appliance stop`)",
                              status=ControlStatus.REFUSED)
        else:
            if control.command == ControlCommand.PAUSE:  # paused first: the answer then says what the phase does
                store.set_run_status(run_id, RunStatus.PAUSED)
                said = pause() if pause is not None else None
            elif control.command == ControlCommand.RESUME:
                store.set_run_status(run_id, RunStatus.RUNNING)
            elif control.command == ControlCommand.STEP:
                step()
            elif control.command == ControlCommand.STOP_NOW:
                assert stop_now is not None  # refused above
                said = stop_now()
                store.set_run_status(run_id, RunStatus.STOPPED)
            else:
                stop_after_iteration()
            store.ack_control(control.id, said or ANSWERS[control.command])
        answered.append(store.get_control(control.id))
    return answered


ROLLOUT_PHASES = ("practise", "evaluate")  # the phases with a safe point before each rollout


def phase_answer(command: ControlCommand, progress: dict[str, Any] | None, *, paused: bool = False) -> str | None:
    """What the phase in flight (`progress`, the loop's heartbeat's) does about a pause or a stop now, for
    the answer; None between phases (the answer is `ANSWERS[command]`). `paused`: already held at a safe
    point (a stop now asked while paused)."""
    if progress is None:
        return None
    phase, stage = progress["phase"], progress.get("stage")
    if phase == TRAIN_PHASE:
        return _training_answer(command, int(progress.get("steps_done") or 0),
                                int(progress.get("steps_total") or 0), paused or bool(progress.get("holding")))
    if stage:
        doing = f"{stage} in the {phase} phase runs to its end first" + (
            ", then no new rollouts start" if phase in ROLLOUT_PHASES else "")
    elif phase in ROLLOUT_PHASES and command == ControlCommand.PAUSE:
        doing = f"no new rollouts start; {progress['in_flight']} in flight finish"
    elif phase in ROLLOUT_PHASES:  # `appliance run` waits for them as long as SIGTERM's stop does (app.STOP_GRACE_S)
        doing = (f"no new rollouts start; {progress['in_flight']} in flight finish within the stop's grace, or "
                 "run again at the next start")
    elif command == ControlCommand.PAUSE:
        doing = f"the {phase} phase in flight has no safe point inside; it runs to its end first"
    else:
        doing = f"the {phase} phase in flight stops at its next check, as on SIGTERM"
    if command == ControlCommand.PAUSE:
        return f"pausing: {doing}"
    return f"stopping: {doing}; `appliance run` then ends, and continues the run when run again"


TRAIN_PHASE = "train"  # a safe point before each optimizer step (`training.learn.Steer`)


def _training_answer(command: ControlCommand, done: int, total: int, paused: bool) -> str:
    """A training phase stops before its next optimizer step (the one in flight ends first)."""
    if not total:
        where = "before its first step"
    elif done >= total:
        where = None
    else:
        where = f"{'before' if paused else 'after'} step {done + 1} of {total}"
    if command == ControlCommand.PAUSE:
        if where is None:
            return (f"pausing: training took its last step ({done} of {total}); saving and syncing the weights run "
                    "to their end first")
        return (f"pausing: training stops {where}; the trainer keeps its memory (the GPU) while paused: "
                "`appliance stop --now` saves what it trained and frees the machine")
    if where is None:
        return (f"stopping: training took its last step ({done} of {total}); saving and syncing the weights run to "
                "their end first; `appliance run` then ends, and continues the run when run again")
    saved = " and saves what it trained" if total else ""
    return f"stopping: training stops {where}{saved}; `appliance run` then ends, and continues the run when run again"


class Steering:
    """The live loop's side of the channel, in a thread of `appliance run` and not of the phase: every
    `interval_s` it answers the pending requests (`answer`) and beats the heartbeat with `progress()`.

    `start` withdraws what was left pending before this loop (no request is acted on late); `stop` ends
    the thread and removes this process's heartbeat, so a requester at once hears that no loop runs.
    A failure inside one beat (a busy store) is logged and the next beat tries again: the thread must not
    die while the loop runs.
    """

    def __init__(self, store: Store, run_id: str, answer: Callable[[], None],
                 progress: Callable[[], dict[str, Any] | None], *, interval_s: float = BEAT_S,
                 log: Callable[[str], None] = print) -> None:
        self.store, self.run_id, self.answer, self.progress = store, run_id, answer, progress
        self.interval_s, self.log = interval_s, log
        self.pid = os.getpid()
        self.started_at = time.time()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="loop-steering")

    def start(self) -> Steering:
        left = self.store.expire_pending_controls(self.run_id, "withdrawn: made while no loop was running")
        if left:
            self.log(f"{left} control request(s) left from before this loop were withdrawn")
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        self.store.beat(self.run_id, self.pid, self.started_at, self.progress())

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.interval_s + 5)
        self.store.end_heartbeat(self.pid)

    def _run(self) -> None:
        failing = False  # told once per spell of failures, not every second
        while not self._done.wait(self.interval_s):
            try:
                self.answer()
                self.beat()
                failing = False
            except Exception as e:  # noqa: BLE001  StoreBusy or a bug: the answering must go on while the run does
                if not failing:
                    said = e.message if isinstance(e, ApplianceError) else f"{type(e).__name__}: {e}"
                    self.log(f"the loop's heartbeat missed a beat ({said}); it tries again every "
                             f"{self.interval_s:g} s")
                failing = True
