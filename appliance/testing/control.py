"""A loop stand-in that answers control requests, for tests of the control channel and the TUI."""

from __future__ import annotations

import threading

from appliance.control import answer_pending
from appliance.schemas import Phase
from appliance.store import Store


class ControlConsumer:
    """Answers control requests through the loop's own contract (`appliance.control.answer_pending`).

    What the loop would do next is imitated: `step` moves the current iteration on by one phase at once
    (the run stays paused); `stop_after_iteration` is remembered (`stop_requested`), as the loop stops
    only at the iteration's end.
    """

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.stop_requested = False

    def poll_once(self) -> int:
        return len(answer_pending(self.store, self.run_id, step=self._step, stop_after_iteration=self._stop))

    def _step(self) -> None:
        its = self.store.iterations(self.run_id)
        if its:
            phases = list(Phase)
            nxt = phases[min(phases.index(its[-1].phase) + 1, len(phases) - 1)]
            self.store.set_iteration_phase(self.run_id, its[-1].index, nxt)

    def _stop(self) -> None:
        self.stop_requested = True

    def run_in_thread(self, interval_s: float = 0.05) -> threading.Event:
        """Poll in a daemon thread until the returned event is set."""
        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                self.poll_once()
                done.wait(interval_s)

        threading.Thread(target=loop, daemon=True).start()
        return done
