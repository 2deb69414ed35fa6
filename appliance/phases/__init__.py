"""The loop's phases, one module each, in the one table the reconciler (`appliance.loop`) dispatches through.

    iteration 0     EVALUATE -> DIAGNOSE                         the base model's held-out pass@1
    iteration i>0   SYNTHESIZE -> VALIDATE -> PRACTISE -> TRAIN -> EVALUATE -> DIAGNOSE -> DONE

A phase is a function `(PhaseContext, iteration index) -> None`, named as its module (`phases.train.train`;
the package's names stay the modules, so a test can patch what a phase calls). It must be idempotent: the
reconciler runs it again after a crash or a failed attempt, and it redoes only what the store does not show
as done.
It raises `Interrupted` when a shutdown cut it short, an `ApplianceError` (or any exception) when it failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from appliance.phases import diagnose, evaluate, practise, synthesize, train, validate
from appliance.phases.context import GenerateText, PhaseContext
from appliance.phases.practise import extra_draws_for, practice_ends_at
from appliance.schemas import Phase

PhaseFn = Callable[[PhaseContext, int], None]

BASELINE_PHASES = (Phase.EVALUATE, Phase.DIAGNOSE)
PHASES = (Phase.SYNTHESIZE, Phase.VALIDATE, Phase.PRACTISE, Phase.TRAIN, Phase.EVALUATE, Phase.DIAGNOSE)
PHASE_TABLE: Mapping[Phase, PhaseFn] = {
    Phase.SYNTHESIZE: synthesize.synthesize,
    Phase.VALIDATE: validate.validate,
    Phase.PRACTISE: practise.practise,
    Phase.TRAIN: train.train,
    Phase.EVALUATE: evaluate.evaluate,
    Phase.DIAGNOSE: diagnose.diagnose,
}

__all__ = ["BASELINE_PHASES", "PHASES", "PHASE_TABLE", "GenerateText", "PhaseContext", "PhaseFn", "extra_draws_for",
           "practice_ends_at"]
