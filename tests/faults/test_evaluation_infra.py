"""Fault: an evaluation whose rollouts all end in infra errors (the engine or Podman broke under it). The
phase fails and its next attempt draws the rollouts again; after `loop.phase_attempts` the run stops with
the cause. A pass@1 of 0 of 0 is never recorded, and a partial failure counts only the evidence."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.errors import EvaluationError
from appliance.evaluate import learning_curve
from appliance.loop import Loop
from appliance.phases import evaluate as evaluate_phase
from appliance.schemas import IterationStatus, Outcome, Phase, RolloutStatus, RunStatus, TaskStatus
from appliance.store import Store
from appliance.testing import FakeEngine


class Machine:
    """The loop's rollout runner (its seam) over a machine that fails the first `broken` rollouts it runs."""

    def __init__(self, store: Store, broken: int) -> None:
        self.store, self.broken, self.ran = store, broken, []

    def __call__(self, _context, work) -> None:
        for _, rid in work:
            if self.store.get_rollout(rid).status != RolloutStatus.PENDING:
                continue  # finished before: the loop's runner runs pending rollouts only
            self.ran.append(rid)
            self.store.start_rollout(rid)
            if self.broken > 0:
                self.broken -= 1
                self.store.finish_rollout(rid, Outcome.INFRA_ERROR, 0.0, error="infra_error: engine connection refused")
            else:
                self.store.finish_rollout(rid, Outcome.SUCCESS, 1.0)


def evaluating_loop(settings: Settings, store: Store, machine: Machine, monkeypatch: pytest.MonkeyPatch) -> Loop:
    settings.loop.families = ["files"]
    settings.loop.heldout_per_cell = 1
    settings.loop.analysis = False
    settings.evaluation.devset = False
    loop = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()), log=lambda _: None)

    def validate(_context, tasks) -> None:
        for t in tasks:
            store.set_task_status(t.id, TaskStatus.VALID)

    monkeypatch.setattr(evaluate_phase, "validate_tasks", validate)
    monkeypatch.setattr(evaluate_phase, "run_pending", machine)
    return loop


def test_all_infra_errors_fail_the_phase_then_the_run(settings: Settings, store: Store,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings.loop.phase_attempts = 2
    machine = Machine(store, broken=10**6)
    loop = evaluating_loop(settings, store, machine, monkeypatch)
    with pytest.raises(EvaluationError, match=r"all (\d+) of \1 rollouts ended in infra errors .*connection refused"):
        loop.tick()
    drawn = len(machine.ran)
    assert drawn == len(store.rollouts(loop.run.id, purpose="eval")) > 0
    assert store.evals(loop.run.id) == [] and store.metric_series(loop.run.id, "heldout_pass@1") == []
    assert store.iterations(loop.run.id)[0].status == IterationStatus.FAILED
    assert loop.tick() is False  # the second attempt draws every rollout again, fails, and stops the run
    assert len(machine.ran) == 2 * drawn and len(store.rollouts(loop.run.id, purpose="eval")) == drawn
    assert store.get_run(loop.run.id).status == RunStatus.FAILED
    [stopped] = [e.message for e in store.events(loop.run.id) if e.kind == "run" and "failed" in e.message]
    assert "evaluate failed 2 times in a row" in stopped and "infra errors" in stopped
    assert store.evals(loop.run.id) == [] and learning_curve(store, loop.run.id) == []  # no 0 of 0, no curve point

    # the machine repaired, a restart evaluates: every rollout drawn once more, none twice, calls forgotten
    machine.broken = 0
    again = evaluating_loop(settings, store, machine, monkeypatch)
    assert again.tick() is True
    rollouts = store.rollouts(loop.run.id, purpose="eval")
    assert len(rollouts) == drawn and all(r.status == RolloutStatus.FINISHED and r.outcome == Outcome.SUCCESS
                                          and r.error is None for r in rollouts)
    [(iteration, p)] = learning_curve(store, loop.run.id)
    assert (iteration, p.passed, p.n) == (0, drawn, drawn)
    assert store.iterations(loop.run.id)[0].phase == Phase.DIAGNOSE


def test_some_infra_errors_are_no_evidence(settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    machine = Machine(store, broken=2)
    loop = evaluating_loop(settings, store, machine, monkeypatch)
    assert loop.tick() is True
    drawn = len(machine.ran)
    [(_, p)] = learning_curve(store, loop.run.id)
    assert (p.passed, p.n) == (drawn - 2, drawn - 2)  # the two infra errors count in neither
    assert store.get_run(loop.run.id).status == RunStatus.RUNNING
    # redone (a crash before the phase was marked done): the two are drawn again
    evaluate_phase.evaluate(loop.context, 0)
    assert len(machine.ran) == drawn + 2
    [(_, p)] = learning_curve(store, loop.run.id)
    assert (p.passed, p.n) == (drawn, drawn)
    assert store.metric_series(loop.run.id, "heldout_pass@1") == [(0, 1.0)]  # replaced, not added


def test_only_an_infra_error_is_drawn_again(store: Store) -> None:
    from appliance.errors import TransitionError
    from appliance.practice import new_rollout

    for rid, outcome in (("ro-infra", Outcome.INFRA_ERROR), ("ro-fail", Outcome.FAILURE)):
        new_rollout(store, harness="builtin", policy_version=0, purpose="eval", rollout_id=rid)
        store.start_rollout(rid)
        store.finish_rollout(rid, outcome, 0.0, error="x")
    store.redraw_rollout("ro-infra")
    r = store.get_rollout("ro-infra")
    assert (r.status, r.outcome, r.reward, r.error, r.finished_at) == (RolloutStatus.PENDING, None, None, None, None)
    with pytest.raises(TransitionError, match="cannot be drawn again"):
        store.redraw_rollout("ro-fail")  # the policy earned that one
