"""The fault suite's loop: the real `Loop` on a real store and the fake engine, each phase body replaced by a
recorder that a test can make fail (a phase's own work is tested in its room). Faults in the machine under
the loop (the store's file, the scheduler's clock, a second process) are real."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace

from appliance.config import Settings
from appliance.loop import Loop
from appliance.schemas import Phase
from appliance.store import Store
from appliance.testing import FakeEngine

BASELINE = [(Phase.EVALUATE, 0), (Phase.DIAGNOSE, 0)]
ITERATION_1 = [(p, 1) for p in (Phase.SYNTHESIZE, Phase.VALIDATE, Phase.PRACTISE, Phase.TRAIN, Phase.EVALUATE,
                                Phase.DIAGNOSE)]


class FaultyLoop(Loop):
    """`faults[phase](index)` runs before the phase records itself in `ran`: it may raise, or write rows."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ran: list[tuple[Phase, int]] = []
        self.faults: dict[Phase, Callable[[int], None]] = {}
        for phase in Phase:
            if phase != Phase.DONE:
                setattr(self, f"phase_{phase}", self._recorder(phase))

    def _recorder(self, phase: Phase) -> Callable[[int], None]:
        def run(index: int) -> None:
            if phase in self.faults:
                self.faults[phase](index)
            self.ran.append((phase, index))
        return run


def make_loop(settings: Settings, store: Store, log: Callable[[str], None] | None = None) -> FaultyLoop:
    practice = SimpleNamespace(stopping=threading.Event())  # the recorders use no sandbox and no proxy
    return FaultyLoop(settings, store, FakeEngine(), practice, log=log or (lambda _: None))  # type: ignore[arg-type]


def ticks(loop: Loop, n: int = 100) -> list[bool]:
    """Tick until a tick has nothing to do (at most n); exceptions propagate."""
    results: list[bool] = []
    while len(results) < n:
        results.append(loop.tick())
        if not results[-1]:
            break
    return results
