"""Dynamic sampling (issue 15): a group without reward variance gets bounded extra draws."""

from __future__ import annotations

from appliance.phases import extra_draws_for


def test_a_group_without_variance_draws_group_size_more_up_to_the_bound():
    assert extra_draws_for([0.0] * 4, 4, 4) == 4
    assert extra_draws_for([0.0] * 8, 4, 4) == 0  # the bound: 4 extra drawn
    assert extra_draws_for([1.0] * 4, 4, 6) == 4 and extra_draws_for([1.0] * 8, 4, 6) == 2
    assert extra_draws_for([0.0] * 4, 4, 0) == 0  # off


def test_no_more_draws_once_rewards_differ_or_nothing_valid():
    assert extra_draws_for([0.0, 0.0, 1.0, 0.0], 4, 4) == 0
    assert extra_draws_for([], 4, 4, drawn=4) == 0  # every rollout an infra error: more would fail too
    assert extra_draws_for([0.0, 0.0], 4, 4, drawn=4) == 4  # two infra errors count as drawn


def test_the_practise_phase_draws_more_for_groups_without_signal_and_resumes_a_crash(store, settings, monkeypatch):
    import threading
    from types import SimpleNamespace

    from appliance import loop as loop_module
    from appliance.phases import practise as practise_phase
    from appliance.practice import new_rollout
    from appliance.schemas import Outcome, Split, Task, TaskStatus
    from appliance.testing import FakeEngine

    settings.loop.group_size, settings.loop.extra_draws = 2, 4
    scores = {"t1": [0.0, 0.0, 0.0, 1.0], "t2": [0.0, 1.0], "t3": [1.0] * 8}  # by task: rewards in draw order
    ran: list[str] = []

    def fake_run(practice, work, **_):
        for _, r in work:
            ran.append(r.id)
            k = int(r.id.rsplit(".", 1)[1])
            store.start_rollout(r.id)
            reward = scores[r.task_id.rsplit(".", 1)[1]][k]
            store.finish_rollout(r.id, Outcome.SUCCESS if reward else Outcome.FAILURE, reward)
        return []

    monkeypatch.setattr(practise_phase, "run_rollouts", fake_run)
    engine = FakeEngine()
    loop = loop_module.Loop(settings, store, engine, SimpleNamespace(stopping=threading.Event()), log=lambda m: None)
    tasks = []
    for name in ("t1", "t2", "t3"):
        task = Task(f"{loop.run.id}.{name}", loop.run.id, "files", 1, "synthetic", Split.TRAIN, TaskStatus.VALID,
                    {"id": name, "family": "files", "difficulty": 1, "instruction": "x", "verify": "true",
                     "solution": "true", "meta": {"iteration": 1}}, iteration=1)
        store.add_task(task)
        tasks.append(task)
    practise_phase.draw_more(loop.context, 1, tasks)  # nothing drawn yet: every group is empty, so nothing to add
    assert ran == []
    for task in tasks:  # the first group_size draws
        for k in range(2):
            new_rollout(store, harness="builtin", policy_version=0, run_id=loop.run.id, task_id=task.id,
                                    group_id=f"{task.id}.g1", iteration=1, rollout_id=f"{task.id}.g1.{k}")
    fake_run(None, [(None, r) for r in store.rollouts(loop.run.id, iteration=1)])
    ran.clear()
    practise_phase.draw_more(loop.context, 1, tasks)
    by_task = {name: sorted(r for r in ran if f".{name}.g1." in r) for name in ("t1", "t2", "t3")}
    assert len(by_task["t1"]) == 2  # 0,0 then 0,1: signal after one extra round
    assert by_task["t2"] == []  # had signal already
    assert len(by_task["t3"]) == 4  # all successes: the bound (4 extra) is reached without signal

    # a crash left a drawn rollout pending: the next pass runs it before deciding on more
    t4 = Task(f"{loop.run.id}.t4", loop.run.id, "files", 1, "synthetic", Split.TRAIN, TaskStatus.VALID,
              {**tasks[0].spec, "id": "t4"})
    store.add_task(t4)
    scores["t4"] = [0.0, 0.0, 1.0, 0.0]
    for k in range(3):
        new_rollout(store, harness="builtin", policy_version=0, run_id=loop.run.id, task_id=t4.id,
                                group_id=f"{t4.id}.g1", iteration=1, rollout_id=f"{t4.id}.g1.{k}")
    fake_run(None, [(None, store.get_rollout(f"{t4.id}.g1.{k}")) for k in range(2)])
    ran.clear()
    practise_phase.draw_more(loop.context, 1, [t4])
    assert ran == [f"{t4.id}.g1.2"]  # run, and its success gives the group signal: no further draws
