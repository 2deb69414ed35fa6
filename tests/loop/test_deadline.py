"""`loop.deadline`: the last iteration practises less so that it still trains, and no iteration starts that
could not train. The clock is the phase module's, moved by the fake practice."""

from __future__ import annotations

import datetime as dt
import threading
from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.loop import Loop
from appliance.phases import practise as practise_phase
from appliance.phases.practise import ITERATION_LEAD_S, group_chunks, learn_reserve_s, practice_ends_at
from appliance.schemas import Event, Outcome, RunStatus, Split, Task, TaskStatus
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.testing.phases import BASELINE_RUN, RecordedPhases

NOW = 1_800_000_000.0


def at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(NOW + seconds, dt.UTC)


def test_groups_run_in_chunks_of_whole_groups_only_under_a_deadline() -> None:
    tasks = list(range(5))
    assert group_chunks(tasks, 4, None) == [tasks]  # type: ignore[arg-type]
    assert group_chunks(tasks, 4, 8) == [[0, 1], [2, 3], [4]]  # type: ignore[arg-type]
    assert group_chunks(tasks, 4, 3) == [[0], [1], [2], [3], [4]]  # type: ignore[arg-type]
    assert group_chunks([], 4, 8) == [] and group_chunks([], 4, None) == []


def test_a_learn_is_expected_to_take_as_long_as_the_runs_last_one(settings: Settings, store: Store) -> None:
    run = store.create_run("r1", {})
    settings.loop.train_reserve_s = 900
    assert learn_reserve_s(settings, store, run.id) == 900  # none has run yet
    store.add_event(Event("info", "iteration 1: train done", run.id, {"iteration": 1, "phase": "train"}, 1000.0))
    store.add_event(Event("info", "iteration 1: evaluate done", run.id, {"iteration": 1, "phase": "evaluate"}, 50.0))
    store.add_event(Event("info", "iteration 2: train done", run.id, {"iteration": 2, "phase": "train"}, 700.0))
    assert learn_reserve_s(settings, store, run.id) == 700
    assert practice_ends_at(settings, store, run.id) is None  # no deadline
    settings.loop.deadline = at(3600)
    assert practice_ends_at(settings, store, run.id) == NOW + 3600 - 700


def practise_six_tasks(settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch,
                       practice_s: float) -> tuple[Loop, list[str]]:
    """Iteration 2's PRACTISE on six tasks, groups of 2 run a chunk of 2 tasks at a time, each chunk taking
    100 s and failing every rollout (so each group would get extra draws), with `practice_s` before only
    LEARN's time is left; the rollout ids run, in order."""
    clock = SimpleNamespace(now=NOW)
    monkeypatch.setattr(practise_phase, "time", SimpleNamespace(time=lambda: clock.now))
    settings.loop.group_size, settings.loop.extra_draws, settings.sandbox.max_concurrent = 2, 4, 1
    settings.loop.train_reserve_s = 600
    settings.loop.deadline = at(600 + practice_s)
    ran: list[str] = []

    def practise_for_100_s(practice, work, **_):
        for _, r in work:
            ran.append(r.id)
            store.start_rollout(r.id)
            store.finish_rollout(r.id, Outcome.FAILURE, 0.0)
        clock.now += 100
        return []

    monkeypatch.setattr(practise_phase, "run_rollouts", practise_for_100_s)
    loop = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()),  # type: ignore[arg-type]
                log=lambda _: None)
    for name in ("t1", "t2", "t3", "t4", "t5", "t6"):
        store.add_task(Task(f"{loop.run.id}.{name}", loop.run.id, "files", 2, "synthetic", Split.TRAIN,
                            TaskStatus.VALID, {"id": name, "family": "files", "difficulty": 2, "instruction": "x",
                                               "verify": "true", "solution": "true", "meta": {"iteration": 2}},
                            iteration=2))
    practise_phase.practise(loop.context, 2)
    return loop, ran


def tasks_of(rollout_ids: list[str]) -> list[str]:
    return sorted({r.split(".")[1] for r in rollout_ids})


def test_practice_under_a_deadline_starts_groups_until_only_learns_time_is_left(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    loop, ran = practise_six_tasks(settings, store, monkeypatch, practice_s=250)
    # chunks start at 0, 100 and 200 s: all six tasks; the extra draws' first round would start at 300 s
    assert tasks_of(ran) == ["t1", "t2", "t3", "t4", "t5", "t6"] and len(ran) == 12
    assert not [e for e in store.events(loop.run.id, kind="practise") if "tasks practised" in e.message]


def test_a_chunk_that_would_start_past_the_time_is_not_started(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    loop, ran = practise_six_tasks(settings, store, monkeypatch, practice_s=150)
    assert tasks_of(ran) == ["t1", "t2", "t3", "t4"] and len(ran) == 8  # at 0 and 100 s; not at 200 s
    (note,) = [e for e in store.events(loop.run.id, kind="practise") if "tasks practised" in e.message]
    assert note.message.startswith("iteration 2: 4 of 6 tasks practised")
    rollouts = store.rollouts(loop.run.id, iteration=2)
    assert len(rollouts) == 8 and all(r.status == "finished" for r in rollouts)  # nothing left pending


def test_no_iteration_starts_without_time_for_its_practice_and_learn(settings: Settings, store: Store) -> None:
    settings.loop.iterations, settings.loop.families = 5, ["files"]
    settings.loop.train_reserve_s = 600
    loop = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()),  # type: ignore[arg-type]
                log=lambda _: None, phases=RecordedPhases())
    loop.settings.loop.deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=600 + ITERATION_LEAD_S - 60)
    while loop.tick():
        pass
    assert loop.phases.ran == BASELINE_RUN  # the baseline is measured; iteration 1 would not have time to train
    run = store.get_run(loop.run.id)
    assert run.status == RunStatus.DONE
    assert "loop.deadline leaves no time" in [e for e in store.events(run.id, kind="run")][-1].message


def test_without_a_deadline_nothing_changes(settings: Settings, store: Store) -> None:
    settings.loop.iterations, settings.loop.families = 1, ["files"]
    loop = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()),  # type: ignore[arg-type]
                log=lambda _: None, phases=RecordedPhases())
    while loop.tick():
        pass
    assert len(store.iterations(loop.run.id)) == 2
