"""Selecting a LEARN phase's data from the store: the serving version's finished rollouts and samples."""

from __future__ import annotations

import pytest

from appliance.errors import ApplianceError
from appliance.schemas import ModelCall, Outcome, Rollout, RolloutStatus, Sample
from appliance.testing import FakeEngine
from appliance.training.data import train_on_practice, training_data


def add_rollout(store, rid: str, *, version: int = 0, outcome: Outcome = Outcome.SUCCESS, finish: bool = True,
                samples: bool = True, calls: bool = False) -> None:
    store.add_rollout(Rollout(rid, "run", "t", "g", 0, "builtin", version, RolloutStatus.PENDING))
    if samples:
        store.add_samples([Sample(rid, "g", 0, [1, 2, 3, 4], [0, 0, 1, 1], [0.0, 0.0, -0.5, -0.5], version)])
    if calls:
        store.add_model_call(ModelCall(None, rid, -1, "ok", {}, {}, [1, 2], [3, 4], [-0.5, -0.25], version, 0.1))
    if finish:
        store.start_rollout(rid)
        store.finish_rollout(rid, outcome, 1.0 if outcome == Outcome.SUCCESS else 0.0)


def test_only_finished_rollouts_of_the_serving_version(store):
    store.create_run("run", {})
    add_rollout(store, "now")
    add_rollout(store, "old", version=1)
    add_rollout(store, "running", finish=False)
    rollouts, samples = training_data(store, "run", policy_version=0)
    assert [r.id for r in rollouts] == ["now"] and [s.rollout_id for s in samples] == ["now"]
    assert [r.id for r in training_data(store, "run", policy_version=1)[0]] == ["old"]


def test_missing_samples_are_rebuilt_from_the_recorded_calls(store):
    store.create_run("run", {})
    add_rollout(store, "a", samples=False, calls=True)
    add_rollout(store, "infra", samples=False, calls=True, outcome=Outcome.INFRA_ERROR)
    _, samples = training_data(store, "run", policy_version=0)
    assert [(s.rollout_id, s.token_ids, s.mask) for s in samples] == [("a", [1, 2, 3, 4], [0, 0, 1, 1])]
    assert store.samples("a") and not store.samples("infra")  # stored for next time; infra errors never built


def test_train_without_practice_says_what_to_do(store, settings):
    store.create_run("run", {})
    with pytest.raises(ApplianceError, match="no finished practice rollouts of policy version 0") as e:
        train_on_practice(store, settings, FakeEngine(), run_id="run")
    assert "practise first" in e.value.hint


def test_the_loops_train_phase_rebuilds_samples_a_crash_lost(store, settings, monkeypatch):
    """A rollout finished by an older version (or killed between finish and samples) still trains."""
    import threading
    from types import SimpleNamespace

    from appliance import loop as loop_module
    from appliance.phases import train as train_phase

    seen = {}

    def fake_learn(store, settings, engine, rollouts, samples, **kw):
        seen["samples"] = [(s.rollout_id, s.mask) for s in samples]
        return SimpleNamespace(policy_version=0, timings={}, steps=[], checkpoint=None)

    monkeypatch.setattr(train_phase, "learn", fake_learn)
    settings.training.demonstrations = False  # this test is about RL samples; demonstrations need the model folder
    engine = FakeEngine()
    engine.base_url = "http://unused"
    loop = loop_module.Loop(settings, store, engine, SimpleNamespace(stopping=threading.Event()), log=lambda m: None)
    store.add_rollout(Rollout("a", loop.run.id, None, "g", 1, "builtin", 0, RolloutStatus.PENDING))
    store.add_model_call(ModelCall(None, "a", -1, "ok", {}, {}, [1, 2], [3, 4], [-0.5, -0.25], 0, 0.1))
    store.start_rollout("a")
    store.finish_rollout("a", Outcome.SUCCESS, 1.0)  # and the process died before the samples were written
    train_phase.train(loop.context, 1)
    assert seen["samples"] == [("a", [0, 0, 1, 1])]
    assert store.samples("a")
