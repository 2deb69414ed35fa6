"""A loop stand-in that answers control requests, for tests of the control channel and the TUI."""

from __future__ import annotations

import threading

from appliance.schemas import ControlCommand, ControlStatus, Phase, RunStatus
from appliance.store import Store


class ControlConsumer:
    """Answers control requests the way the loop must (see `appliance.control`): at a safe point, in
    order, moving `runs.status` and acking each request with what it did.

    `step` advances the current iteration by one phase and leaves the run paused; `stop_after_iteration`
    is acknowledged at once and remembered (`stop_requested`), as the loop stops only at the iteration's
    end.
    """

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.stop_requested = False

    def poll_once(self) -> int:
        answered = 0
        for ctl in self.store.pending_controls(self.run_id):
            status = self.store.get_run(self.run_id).status
            cmd = ctl.command
            if cmd == ControlCommand.PAUSE and status == RunStatus.RUNNING:
                self.store.set_run_status(self.run_id, RunStatus.PAUSED)
                result = "paused"
            elif cmd == ControlCommand.RESUME and status == RunStatus.PAUSED:
                self.store.set_run_status(self.run_id, RunStatus.RUNNING)
                result = "running"
            elif cmd == ControlCommand.STEP and status == RunStatus.PAUSED and self.store.iterations(self.run_id):
                its = self.store.iterations(self.run_id)
                phases = list(Phase)
                nxt = phases[min(phases.index(its[-1].phase) + 1, len(phases) - 1)]
                self.store.set_iteration_phase(self.run_id, its[-1].index, nxt)
                result = f"stepped to {nxt}; paused"
            elif cmd == ControlCommand.STOP_AFTER_ITERATION and status in (RunStatus.RUNNING, RunStatus.PAUSED):
                self.stop_requested = True
                result = "will stop at the end of this iteration"
            else:
                self.store.ack_control(ctl.id, f"cannot {cmd} while {status}", status=ControlStatus.REFUSED)
                answered += 1
                continue
            self.store.ack_control(ctl.id, result)
            answered += 1
        return answered

    def run_in_thread(self, interval_s: float = 0.05) -> threading.Event:
        """Poll in a daemon thread until the returned event is set."""
        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                self.poll_once()
                done.wait(interval_s)

        threading.Thread(target=loop, daemon=True).start()
        return done
