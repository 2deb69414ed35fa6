"""The fault suite's loop: the real `Loop` on a real store and the fake engine, with a phase table that only
records (`RecordedPhases`: `loop.phases.faults[phase](index)` runs before the phase records itself, and may
raise or write rows; a phase's own work is tested in its room). Faults in the machine under the loop (the
store's file, the scheduler's clock, a second process) are real."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace

from appliance.config import Settings
from appliance.loop import Loop
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.testing.phases import BASELINE_RUN as BASELINE
from appliance.testing.phases import ITERATION_1_RUN as ITERATION_1
from appliance.testing.phases import RecordedPhases

__all__ = ["BASELINE", "ITERATION_1", "make_loop", "ticks"]


def make_loop(settings: Settings, store: Store, log: Callable[[str], None] | None = None) -> Loop:
    practice = SimpleNamespace(stopping=threading.Event())  # the recorders use no sandbox and no proxy
    return Loop(settings, store, FakeEngine(), practice, log=log or (lambda _: None),  # type: ignore[arg-type]
                phases=RecordedPhases())


def ticks(loop: Loop, n: int = 100) -> list[bool]:
    """Tick until a tick has nothing to do (at most n); exceptions propagate."""
    results: list[bool] = []
    while len(results) < n:
        results.append(loop.tick())
        if not results[-1]:
            break
    return results
