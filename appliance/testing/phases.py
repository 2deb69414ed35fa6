"""A phase table whose phases only record that they ran: for testing the reconciler (`appliance.loop`) alone.

Each phase's own work is tested in its room and end to end by tests/loop/test_kill_and_resume.py; a loop
built with `phases=RecordedPhases()` runs its order, controls, retries and resumption on a real store
without a sandbox, an engine or a proxy.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.phases import PhaseContext, PhaseFn
from appliance.schemas import Phase

BASELINE_RUN = [(Phase.EVALUATE, 0), (Phase.DIAGNOSE, 0)]
ITERATION_1_RUN = [(p, 1) for p in (Phase.SYNTHESIZE, Phase.VALIDATE, Phase.PRACTISE, Phase.TRAIN, Phase.EVALUATE,
                                    Phase.DIAGNOSE)]


class RecordedPhases(dict[Phase, PhaseFn]):
    """Every phase but DONE. `faults[phase](index)` runs before the phase records itself in `ran`: it may
    raise (the phase failed) or write rows (the phase's effects, or a fault in the machine under it)."""

    def __init__(self) -> None:
        super().__init__({phase: self._recorder(phase) for phase in Phase if phase != Phase.DONE})
        self.ran: list[tuple[Phase, int]] = []
        self.faults: dict[Phase, Callable[[int], None]] = {}

    def fail_once(self, phase: Phase, error: BaseException) -> None:
        def fail(_index: int) -> None:
            del self.faults[phase]
            raise error
        self.faults[phase] = fail

    def _recorder(self, phase: Phase) -> PhaseFn:
        def run(_context: PhaseContext, index: int) -> None:
            if phase in self.faults:
                self.faults[phase](index)
            self.ran.append((phase, index))
        return run
