"""Steering a running loop: pause, resume, step, stop after the iteration.

The TUI and `appliance pause|resume|step|stop` call `request`, which writes a pending row to the store's
`controls` table and waits until the loop answers it. The loop calls `answer_pending` at its safe points:
each request the run's status allows (`ALLOWED`, the contract both sides keep) is acknowledged DONE with
`ANSWERS[command]` and done; any other is acknowledged REFUSED with the reason, which `request` raises as
a `ControlError`. A request that no loop answers in time is marked expired, so a loop started later does
not act on a stale click. Stand-ins for the loop in tests answer through `answer_pending` too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from appliance.errors import ControlError
from appliance.schemas import Control, ControlCommand, ControlStatus, Run, RunStatus
from appliance.store import Store

DEFAULT_TIMEOUT_S = 15.0

# The run statuses in which a command makes sense; anything else is refused before it reaches the loop.
ALLOWED: dict[ControlCommand, set[RunStatus]] = {
    ControlCommand.PAUSE: {RunStatus.RUNNING},
    ControlCommand.RESUME: {RunStatus.PAUSED},
    ControlCommand.STEP: {RunStatus.PAUSED},
    ControlCommand.STOP_AFTER_ITERATION: {RunStatus.RUNNING, RunStatus.PAUSED},
}

HINTS: dict[ControlCommand, str] = {
    ControlCommand.PAUSE: "the run is not running; `appliance resume` continues a paused run",
    ControlCommand.RESUME: "only a paused run can be resumed; `appliance run` continues a stopped or failed run",
    ControlCommand.STEP: "step runs one phase of a paused run: `appliance pause` first",
    ControlCommand.STOP_AFTER_ITERATION: "the run is not active; `appliance status` shows what it is doing",
}


# What the loop answers when it takes a command (the `controls.result` of a DONE request).
ANSWERS: dict[ControlCommand, str] = {
    ControlCommand.PAUSE: "paused",
    ControlCommand.RESUME: "running",
    ControlCommand.STEP: "running one phase, then paused again",
    ControlCommand.STOP_AFTER_ITERATION: "will stop at the end of this iteration",
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


def request(store: Store, command: ControlCommand | str, *, run_id: str | None = None,
            timeout_s: float = DEFAULT_TIMEOUT_S, wait: bool = True, poll_s: float = 0.1,
            sleep: Callable[[float], None] = time.sleep) -> Control:
    """Ask the loop to act and (by default) wait for its answer; returns the answered request."""
    try:
        command = ControlCommand(command)
    except ValueError:
        raise ControlError(f"unknown control command {command!r}",
                           f"choose one of: {', '.join(c.value for c in ControlCommand)}") from None
    run = resolve_run(store, run_id)
    check_allowed(run, command)
    control = store.request_control(run.id, command)
    if not wait:
        return control
    deadline = time.monotonic() + timeout_s
    while control.status == ControlStatus.PENDING:
        if time.monotonic() >= deadline:
            if store.ack_control(control.id, f"no loop answered within {timeout_s:g} s", status=ControlStatus.EXPIRED):
                raise ControlError(
                    f"no loop answered the {command} request for run {run.id!r} within {timeout_s:g} s",
                    "is `appliance run` running against this store? The request was withdrawn; try again",
                )
        sleep(poll_s)
        control = store.get_control(control.id)
    if control.status == ControlStatus.REFUSED:
        raise ControlError(f"the loop refused {command}: {control.result}", "`appliance status` shows the run's state")
    return control


def answer_pending(store: Store, run_id: str, *, step: Callable[[], None],
                   stop_after_iteration: Callable[[], None]) -> list[Control]:
    """The loop's side, at a safe point: answer the run's pending requests in order; returns them answered.

    Pause and resume move `runs.status`; a step calls `step` (the run stays paused; the caller runs one
    phase); a stop calls `stop_after_iteration` (the caller stops when the iteration ends). The
    acknowledgement comes after the act, so a requester that sees DONE sees its effect too.
    """
    answered = []
    for control in store.pending_controls(run_id):
        status = store.get_run(run_id).status
        if status not in ALLOWED[control.command]:
            store.ack_control(control.id, f"cannot {control.command} while the run is {status}",
                              status=ControlStatus.REFUSED)
        else:
            if control.command == ControlCommand.PAUSE:
                store.set_run_status(run_id, RunStatus.PAUSED)
            elif control.command == ControlCommand.RESUME:
                store.set_run_status(run_id, RunStatus.RUNNING)
            elif control.command == ControlCommand.STEP:
                step()
            else:
                stop_after_iteration()
            store.ack_control(control.id, ANSWERS[control.command])
        answered.append(store.get_control(control.id))
    return answered
