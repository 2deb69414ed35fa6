"""The loop's EVALUATE phase measures the held-out set and then the transfer dev set, with the phase's
validation and rollout runner standing in (their work is tested in their rooms)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.evaluate import spread
from appliance.loop import Loop
from appliance.phases import evaluate as evaluate_phase
from appliance.practice import new_rollout
from appliance.schemas import Outcome, Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks.devset import devset_tasks
from appliance.tasks.families import synthesize
from appliance.testing import FakeEngine


def test_evaluate_runs_the_held_out_set_then_the_dev_set(settings: Settings, store: Store,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    settings.loop.families = ["files"]
    settings.loop.heldout_per_cell = 1
    practice = SimpleNamespace(stopping=threading.Event())
    loop = Loop(settings, store, FakeEngine(), practice, log=lambda _: None)
    validated: list[str] = []
    ran: list[str] = []

    def validate(context, tasks):
        # no safe point inside validation: the progress names it, so an answer can say it runs to its end
        assert context.progress.stage == f"validating {len(tasks)} tasks"
        for t in tasks:
            validated.append(t.split)
            store.set_task_status(t.id, TaskStatus.VALID)

    def run_pending(_context, work):
        for spec, rid in work:
            store.start_rollout(rid)
            store.finish_rollout(rid, Outcome.FAILURE, 0.0)
            ran.append(spec.family)

    monkeypatch.setattr(evaluate_phase, "validate_tasks", validate)
    monkeypatch.setattr(evaluate_phase, "run_pending", run_pending)
    store.start_iteration(loop.run.id, 0, 0)
    evaluate_phase.evaluate(loop.context, 0)
    assert loop.context.progress.stage == ""
    k = settings.evaluation.samples_per_task
    dev = len(devset_tasks())
    base = settings.evaluation.baseline_devset_tasks  # the baseline's balanced prefix, validated alone
    assert validated.count(Split.DEV) == base and len(store.tasks(loop.run.id, split=Split.DEV)) == dev
    assert 0 < base < dev and sum(f.startswith("dev-") for f in ran) == base * k and "files" in ran
    said = [e.message for e in store.events(loop.run.id) if e.kind == "evaluate"]
    assert any("held-out pass@1" in m for m in said)
    assert any("dev-set pass@1 0.0% [0.0%, " in m and f"over {base} tasks x {k}" in m for m in said)


@pytest.mark.parametrize("practised", [False, True])
def test_after_warmstart_off_skips_only_the_warm_start_alones_evaluation(settings: Settings, store: Store,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        practised: bool) -> None:
    settings.loop.families = ["files"]
    settings.evaluation.after_warmstart = False
    loop = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()), log=lambda _: None)
    measured: list[int] = []
    monkeypatch.setattr(evaluate_phase, "evaluate_heldout", lambda *a, **k: measured.append(a[3]) or _Said())
    monkeypatch.setattr(evaluate_phase, "evaluate_devset", lambda *a, **k: None)
    monkeypatch.setattr(evaluate_phase, "validate_tasks", lambda _context, tasks: None)
    store.start_iteration(loop.run.id, 1, 1)
    if practised:  # a run that practised in iteration 1 (the setting was off then): its evaluation stays
        spec = synthesize("files", 2, 1)[0]
        store.add_task(Task(spec.id, loop.run.id, "files", 2, spec.source, Split.TRAIN, TaskStatus.VALID,
                            spec.to_spec()))
        new_rollout(store, harness="builtin", policy_version=1, run_id=loop.run.id,
                    task_id=spec.id, group_id="g", iteration=1, purpose="train", rollout_id="g.0")
    evaluate_phase.evaluate(loop.context, 1)
    store.start_iteration(loop.run.id, 2, 2)
    evaluate_phase.evaluate(loop.context, 2)
    assert measured == ([1, 2] if practised else [2])
    skipped = [e.message for e in store.events(loop.run.id) if "not evaluated" in e.message]
    assert len(skipped) == (0 if practised else 1)


class _Said:
    tasks, k = 1, 1

    def describe(self) -> str:
        return "0.0%"


def test_the_baseline_validates_only_the_tasks_it_evaluates_and_a_rejected_one_makes_room(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: agent-free validation of the whole held-out set (90) and dev set (66) before the base model's
    first rollout took minutes on a loaded 2-core machine; the baseline evaluates 45 and 10 of them."""
    practice = SimpleNamespace(stopping=threading.Event())
    loop = Loop(settings, store, FakeEngine(), practice, log=lambda _: None)
    heldout = store.tasks(loop.run.id, split=Split.HELDOUT)
    ev = settings.evaluation
    assert len(heldout) > ev.baseline_tasks
    rejected = spread(heldout)[0]  # the first of the order: validation refuses it
    validated: list[Task] = []

    def validate(_context, tasks):
        for t in tasks:
            validated.append(t)
            store.set_task_status(t.id, TaskStatus.REJECTED if t.id == rejected.id else TaskStatus.VALID)

    def run_pending(_context, work):
        for _spec, rid in work:
            store.start_rollout(rid)
            store.finish_rollout(rid, Outcome.FAILURE, 0.0)

    monkeypatch.setattr(evaluate_phase, "validate_tasks", validate)
    monkeypatch.setattr(evaluate_phase, "run_pending", run_pending)
    store.start_iteration(loop.run.id, 0, 0)
    evaluate_phase.evaluate(loop.context, 0)
    held = [t for t in validated if t.split == Split.HELDOUT]
    assert len(held) == ev.baseline_tasks + 1  # was all 90: the prefix, and the next one for the rejected
    evaluated = {r.task_id for r in store.rollouts(loop.run.id, iteration=0, purpose="eval")}
    valid = [t for t in store.tasks(loop.run.id, split=Split.HELDOUT) if t.status == TaskStatus.VALID]
    assert evaluated >= {t.id for t in spread(valid)[:ev.baseline_tasks]}
    assert rejected.id not in evaluated
    assert sum(t.split == Split.DEV for t in validated) == ev.baseline_devset_tasks  # was all 66
