"""A loop stand-in that answers control requests, for tests of the control channel and the TUI."""

from __future__ import annotations

import os
import threading
import time

from appliance.control import answer_pending
from appliance.schemas import Phase
from appliance.store import Store


class ControlConsumer:
    """Answers control requests through the loop's own contract (`appliance.control.answer_pending`).

    What the loop would do next is imitated: `step` moves the current iteration on by one phase at once
    (the run stays paused); `stop_after_iteration` is remembered (`stop_requested`), as the loop stops
    only at the iteration's end; `stop_now` stops the run at once (`stopped_now`). Like the live loop it
    keeps a heartbeat: one beat when made and one each poll, so a requester sees a loop alive.
    """

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.stop_requested = False
        self.stopped_now = False
        self.started_at = time.time()
        self.beat()

    def beat(self) -> None:
        self.store.beat(self.run_id, os.getpid(), self.started_at, None)

    def poll_once(self) -> int:
        self.beat()
        return len(answer_pending(self.store, self.run_id, step=self._step, stop_after_iteration=self._stop,
                                  stop_now=self._stop_now))

    def _stop_now(self) -> None:
        self.stopped_now = True

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
