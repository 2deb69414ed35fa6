"""The loop's EVALUATE phase measures the held-out set and then the transfer dev set, with the phase's
validation and rollout runner standing in (their work is tested in their rooms)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.loop import Loop
from appliance.phases import evaluate as evaluate_phase
from appliance.schemas import Outcome, Split, TaskStatus
from appliance.store import Store
from appliance.tasks.devset import devset_tasks
from appliance.testing import FakeEngine


def test_evaluate_runs_the_held_out_set_then_the_dev_set(settings: Settings, store: Store,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    settings.loop.families = ["files"]
    settings.loop.heldout_per_cell = 1
    practice = SimpleNamespace(stopping=threading.Event())
    loop = Loop(settings, store, FakeEngine(), practice, log=lambda _: None)
    validated: list[str] = []
    ran: list[str] = []

    def validate(_context, tasks):
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
    k = settings.evaluation.samples_per_task
    dev = len(devset_tasks())
    assert validated.count(Split.DEV) == dev and len(store.tasks(loop.run.id, split=Split.DEV)) == dev
    assert sum(f.startswith("dev-") for f in ran) == dev * k and "files" in ran
    said = [e.message for e in store.events(loop.run.id) if e.kind == "evaluate"]
    assert any("held-out pass@1" in m for m in said)
    assert any("dev-set pass@1 0.0% [0.0%, " in m and f"over {dev} tasks x {k}" in m for m in said)
