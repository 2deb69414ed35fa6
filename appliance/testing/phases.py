"""A phase table whose phases only record that they ran: for testing the reconciler (`appliance.loop`) alone.

Each phase's own work is tested in its room and end to end by tests/loop/test_kill_and_resume.py; a loop
built with `phases=RecordedPhases()` runs its order, controls, retries and resumption on a real store
without a sandbox, an engine or a proxy.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from appliance.phases import PhaseContext, PhaseFn
from appliance.phases.practise import run_pending
from appliance.schemas import Outcome, Phase, Rollout, RolloutStatus
from appliance.store import Store

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


def rollouts_phase(n: int, purpose: str = "eval") -> PhaseFn:
    """A long stand-in phase: n rollouts of the iteration (fixed ids, so a rerun finds them) through the
    phases' own resumable path (`phases.practise.run_pending`), with its safe points; pair it with
    `SlowRollouts` in place of `appliance.practice.run_rollout`."""
    def run(ctx: PhaseContext, index: int) -> None:
        work: list[tuple[Any, str]] = []
        for k in range(n):  # as `practice.new_rollout` makes them: idempotent on the id
            rid = f"{ctx.run_id}.{purpose}{index}.{k}"
            ctx.store.add_rollout(Rollout(rid, ctx.run_id, None, None, index, "builtin", 0, RolloutStatus.PENDING,
                                          purpose))
            work.append((None, rid))
        run_pending(ctx, work)
    return run


class SlowRollouts:
    """Stands in for `appliance.practice.run_rollout`: each rollout runs `seconds` and succeeds, recorded in
    the store as a real one is; `started` counts the starts of each id (a rollout run twice shows 2)."""

    def __init__(self, store: Store, seconds: float) -> None:
        self.store, self.seconds = store, seconds
        self.started: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, _practice: object, _spec: object, rollout: Rollout) -> Rollout:
        with self._lock:
            self.started[rollout.id] += 1
        self.store.start_rollout(rollout.id)
        time.sleep(self.seconds)
        self.store.finish_rollout(rollout.id, Outcome.SUCCESS, 1.0)
        return self.store.get_rollout(rollout.id)  # what the phases read is the store, not this


class SlowSteps:
    """Stands in for the trainer of a TRAIN phase (`training_phase`): each GRPO step takes `seconds`; `taken`
    counts the steps of each part (a step taken twice shows 2); a stop's midway state is kept in `saved`."""

    value_head = None

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.taken: Counter[str] = Counter()
        self.saved: Any = None  # `training.midway.Midway`, as `save_midway` would write it

    def freeze_old_logps(self, _parts: object) -> None:
        pass

    def assign_credit(self, parts: Any) -> Any:
        return parts

    def grpo_step(self, part: str) -> dict[str, float]:
        self.taken[part] += 1
        time.sleep(self.seconds)
        return {"loss": 0.0, "trained_tokens": 1.0}


def training_phase(trainer: SlowSteps, n: int) -> PhaseFn:
    """A long stand-in TRAIN phase: n optimizer steps through the real `training.learn.run_steps` and the TRAIN
    phase's own safe point (`phases.train.steer`); each step's metrics row is recorded at its global step, and
    a stop's midway state is what the next run of the phase goes on from."""
    from appliance.phases.train import steer
    from appliance.training.learn import run_steps
    from appliance.training.midway import Midway

    def run(ctx: PhaseContext, index: int) -> None:
        work = trainer.saved or Midway(ctx.run_id, index, [], [f"part{k}" for k in range(n)])  # type: ignore[misc]
        trainer.saved = None

        def keep(w: Midway) -> None:
            trainer.saved = w

        record = lambda m: ctx.store.add_metrics(ctx.run_id, work.global_step, m)  # noqa: E731
        run_steps(trainer, [], work.parts, record, steer(ctx).safe_point, work=work, keep=keep)  # type: ignore[arg-type]
    return run
