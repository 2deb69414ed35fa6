"""Held-out evaluation: pass@1 with Wilson intervals, k samples per task, inside the budget."""

from __future__ import annotations

from appliance.config import Settings
from appliance.evaluate import (
    budget_tasks,
    devset_budget,
    devset_curve,
    evaluate_devset,
    evaluate_heldout,
    learning_curve,
    pass_at_1,
    spread,
)
from appliance.practice import new_rollout
from appliance.schemas import Outcome, Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks.families import synthesize


def heldout(store: Store, run_id: str = "r") -> list[Task]:
    tasks = []
    for family in ("files", "text"):
        for level in (2, 3):
            for spec in synthesize(family, level, 3, seed="ev", split="heldout"):
                t = Task(f"{run_id}.{spec.id}", run_id, family, level, "procedural", Split.HELDOUT,
                         TaskStatus.PROPOSED, spec.to_spec())
                store.add_task(t)
                store.set_task_status(t.id, TaskStatus.VALID)
                tasks.append(store.get_task(t.id))
    return tasks


def test_pass_at_1_pools_cells_with_wilson_intervals() -> None:
    p = pass_at_1([{"difficulty": 2, "n": 10, "passed": 8}, {"difficulty": 3, "n": 10, "passed": 0}], k=2, tasks=10)
    assert (p.passed, p.n, p.pass_at_1) == (8, 20, 0.4)
    assert 0.2 < p.low < 0.4 < p.high < 0.65
    assert p.by_level["2"]["passed"] == 8 and p.by_level["3"]["high"] < 0.35
    assert "40.0%" in p.describe() and p.as_dict()["pass_at_1"] == 0.4


def test_budget_cuts_a_balanced_prefix(settings: Settings, store: Store) -> None:
    store.create_run("r", {})
    tasks = heldout(store)
    ordered = spread(tasks)
    assert {(t.family, t.difficulty) for t in ordered[:4]} == {("files", 2), ("files", 3), ("text", 2), ("text", 3)}
    assert budget_tasks(tasks, settings, elapsed_s=None, cost_s=None) == ordered  # baseline: everything
    settings.evaluation.min_tasks = 2
    settings.evaluation.samples_per_task = 2
    settings.evaluation.budget_share = 0.25  # eval may take 1/3 of the rest: 300 s -> 100 s -> 5 tasks x 2 x 10 s
    assert budget_tasks(tasks, settings, elapsed_s=300, cost_s=10) == ordered[:5]
    assert budget_tasks(tasks, settings, elapsed_s=1, cost_s=10) == ordered[:2]  # never below min_tasks


def test_k_rollouts_per_task_infra_errors_are_no_evidence(settings: Settings, store: Store) -> None:
    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    tasks = heldout(store)
    settings.evaluation.samples_per_task = 3
    ran = []

    def run_pending(work):  # stands in for the loop's rollout runner: pass level 2, fail level 3, one infra
        for spec, rid in work:
            store.start_rollout(rid)
            outcome = Outcome.SUCCESS if spec.difficulty == 2 else Outcome.FAILURE
            if rid.endswith(".2") and spec.family == "text":
                outcome = Outcome.INFRA_ERROR
            store.finish_rollout(rid, outcome, float(outcome == Outcome.SUCCESS))
            ran.append(rid)

    result = evaluate_heldout(store, settings, "r", 0, 0, harness="builtin", run_pending=run_pending,
                              new_rollout=new_rollout)
    assert len(ran) == 12 * 3 and result.tasks == 12 and result.k == 3
    assert result.n == 36 - 6 and result.passed == 9 + 9 - 3
    assert result.by_level["2"]["pass_at_1"] == 1.0 and result.by_level["3"]["passed"] == 0
    assert f"{tasks[0].id}.eval0" in ran  # the first sample keeps the loop's old rollout id
    ((it, curve),) = learning_curve(store, "r")
    assert it == 0 and (curve.passed, curve.n, curve.k, curve.tasks) == (result.passed, result.n, 3, 12)
    assert dict(store.metric_series("r", "heldout_low"))[0] == result.low


def _validate_all(store: Store):
    def validate(tasks: list[Task]) -> None:  # stands in for the loop's agent-free validation
        for t in tasks:
            store.set_task_status(t.id, TaskStatus.VALID)
    return validate


def _runner(store: Store, ran: list[str]):
    def run_pending(work):  # chores pass, everything else fails; finished ones stay (as in the loop)
        for spec, rid in work:
            if store.get_rollout(rid).outcome is not None:
                continue
            store.start_rollout(rid)
            outcome = Outcome.SUCCESS if spec.family == "dev-chore" else Outcome.FAILURE
            store.finish_rollout(rid, outcome, float(outcome == Outcome.SUCCESS))
            ran.append(rid)
    return run_pending


def test_the_dev_set_is_evaluated_whole_at_baseline_per_category(settings: Settings, store: Store) -> None:
    from appliance.tasks.devset import devset_tasks

    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    settings.evaluation.baseline_devset_tasks = 0  # the whole set at the baseline (by default its prefix: below)
    ran: list[str] = []
    result = evaluate_devset(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                             new_rollout=new_rollout, validate=_validate_all(store))
    n = len(devset_tasks())
    k = settings.evaluation.samples_per_task
    assert k >= 2 and result is not None and result.tasks == n and result.n == n * k == len(ran)
    chores = result.by_level["chore"]
    assert chores["pass_at_1"] == 1.0 and result.by_level["git"]["passed"] == 0
    assert result.passed == chores["n"] and result.low < result.pass_at_1 < result.high
    assert not store.evals("r") and not learning_curve(store, "r")  # the held-out cells stay held-out only
    ((it, curve),) = devset_curve(store, "r")
    assert it == 0 and (curve.passed, curve.n, curve.k, curve.tasks) == (result.passed, result.n, k, n)
    assert curve.by_level == result.by_level
    from appliance.diagnosis import build_report

    report, markdown = build_report(store, "r", 0)
    dev = report.devset
    assert dev is not None
    assert (dev["pass_at_1"], dev["low"], dev["high"], dev["n"], dev["k"]) == (result.pass_at_1, result.low,
                                                                                 result.high, result.n, k)
    assert dev["by_category"]["chore"]["pass_at_1"] == 1.0 and dev["by_category"]["git"]["high"] < 0.5
    assert f"**Dev-set pass@1 (transfer, never trained on):** {result.pass_at_1:.1%}" in markdown
    assert "- chore: " in markdown and "## Dev-set pass@1 with 95 % interval" in markdown


def test_a_run_measures_the_dev_set_batch_it_was_started_with(settings: Settings, store: Store) -> None:
    from appliance.tasks.devset import devset_tasks

    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    settings.evaluation.devset_batch = "second"
    settings.evaluation.baseline_devset_tasks = 0  # all of it
    ran: list[str] = []
    result = evaluate_devset(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                             new_rollout=new_rollout, validate=_validate_all(store))
    second = {s.id for s in devset_tasks("second")}
    assert result is not None and result.tasks == len(second)
    assert {t.id.removeprefix("r.") for t in store.tasks("r", split=Split.DEV)} == second


def test_the_dev_set_gets_what_the_held_out_set_left_of_the_budget(settings: Settings, store: Store) -> None:
    store.create_run("r", {})
    tasks = heldout(store)
    settings.evaluation.samples_per_task = 2
    settings.evaluation.devset_min_tasks = 3
    ordered = spread(tasks)
    assert devset_budget(tasks, settings, allowed_s=None, cost_s=None) == ordered  # baseline: all of it
    assert devset_budget(tasks, settings, allowed_s=100, cost_s=10) == ordered[:5]
    assert devset_budget(tasks, settings, allowed_s=-50, cost_s=10) == ordered[:3]  # never below the floor


def test_the_dev_set_can_be_turned_off(settings: Settings, store: Store) -> None:
    store.create_run("r", {})
    settings.evaluation.devset = False
    assert evaluate_devset(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, []),
                           new_rollout=new_rollout, validate=_validate_all(store)) is None
    assert not store.tasks("r", split=Split.DEV)


def test_bench_learning_prints_the_dev_curve_beside_the_held_out_one(settings: Settings, store: Store, capsys) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import bench_learning

    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    heldout(store)
    ran: list[str] = []
    evaluate_heldout(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                     new_rollout=new_rollout)
    dev = evaluate_devset(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                          new_rollout=new_rollout, validate=_validate_all(store))
    assert settings.db_path == settings.home / "appliance.db"
    assert bench_learning.report(settings.home) == 0
    out = capsys.readouterr().out
    assert "held-out pass@1 [95 %]      dev-set pass@1 [95 %]" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("0 ") and "chore" in line)
    assert "0.0% [" in row and f"{dev.pass_at_1:6.1%} [{dev.low:5.1%}" in row


def test_bench_learning_lets_only_a_trained_policys_evaluation_run_past_the_budget(settings: Settings,
                                                                                     store: Store) -> None:
    import sys
    from pathlib import Path

    from appliance.schemas import Phase

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import bench_learning

    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    store.set_iteration_phase("r", 0, Phase.EVALUATE)
    assert not bench_learning.evaluating_trained_policy(settings.home)  # the base model's baseline
    store.start_iteration("r", 1, 0)
    for phase, under_way in ((Phase.PRACTISE, False), (Phase.TRAIN, False), (Phase.EVALUATE, True),
                             (Phase.DIAGNOSE, True), (Phase.DONE, False)):
        store.set_iteration_phase("r", 1, phase)
        assert bench_learning.evaluating_trained_policy(settings.home) is under_way, phase


def test_bench_checkpoint_refuses_a_folder_that_is_not_a_model(tmp_path, monkeypatch, capsys) -> None:
    import sys
    from pathlib import Path

    import pytest

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import bench_checkpoint

    monkeypatch.setattr(sys, "argv", ["bench_checkpoint", "--model", str(tmp_path), "--home", str(tmp_path / "h")])
    with pytest.raises(SystemExit) as stop:
        bench_checkpoint.main()
    assert stop.value.code == 2 and "is not a model folder (no config.json)" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()


def test_after_the_baseline_the_dev_set_gets_what_the_held_out_set_left(settings: Settings, store: Store) -> None:
    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    heldout(store)
    settings.evaluation.samples_per_task = 2
    settings.evaluation.budget_share = 0.5  # evaluation may take as long as what ran before it
    run = _runner(store, [])
    args = {"harness": "builtin", "run_pending": run, "new_rollout": new_rollout}
    evaluate_heldout(store, settings, "r", 0, 0, **args)
    settings.evaluation.baseline_devset_tasks = 0
    base = evaluate_devset(store, settings, "r", 0, 0, validate=_validate_all(store), **args)
    assert base is not None and base.tasks == 66  # the baseline: all of it, by setting

    def timed(iteration: int, start: float, seconds_each: float) -> None:  # rollouts' wall times, as measured
        with store.write() as c:
            ids = [r.id for r in store.rollouts("r", iteration=iteration, purpose="eval") if r.started_at is not None]
            for i, rid in enumerate(sorted(ids)):
                c.execute("UPDATE rollouts SET started_at = ?, finished_at = ? WHERE id = ?",
                          (start, start + seconds_each * (i + 1), rid))

    timed(0, 1.0, 10.0)  # 10 s a rollout
    store.start_iteration("r", 1, 0)
    t0 = store.get_iteration("r", 1).started_at
    held = evaluate_heldout(store, settings, "r", 1, 0, clock=lambda: t0 + 1000, **args)
    assert held.tasks == 12  # 1000 s allowed, 12 tasks x 2 x 10 s fit
    timed(1, t0 + 1000, 10.0)  # the held-out evaluation took 240 s
    dev = evaluate_devset(store, settings, "r", 1, 0, validate=_validate_all(store), clock=lambda: t0 + 1240, **args)
    assert dev is not None and dev.tasks == (1000 - 240) // 20  # what was left: 38 tasks x 2 x 10 s
    again = evaluate_devset(store, settings, "r", 1, 0, validate=_validate_all(store), clock=lambda: t0 + 400, **args)
    assert again is not None and again.tasks == settings.evaluation.devset_min_tasks  # nothing left: the floor


def test_the_baseline_evaluates_one_task_per_family_and_level_then_the_same_prefix_grows(
        settings: Settings, store: Store) -> None:
    """Issue 49: the base model's whole held-out set (180 rollouts, nearly all cut at the turn limit) held back
    the first training step; the baseline is the balanced prefix every later point also cuts from."""
    from appliance.tasks.families import FAMILIES
    from appliance.tasks.heldout import heldout_tasks

    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    lp = settings.loop
    for spec in heldout_tasks(list(FAMILIES), lp.heldout_levels, lp.heldout_per_cell, seed_base="r"):
        store.add_task(spec.task_row("r", Split.HELDOUT))
    tasks = store.tasks("r", split=Split.HELDOUT)
    _validate_all(store)(tasks)
    cells = {(t.family, t.difficulty) for t in tasks}
    assert len(tasks) == 2 * len(cells)  # the default set: two per family and level
    ran: list[str] = []
    base = evaluate_heldout(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                            new_rollout=new_rollout)
    k = settings.evaluation.samples_per_task
    assert base.tasks == len(cells)  # was every held-out task (90)
    assert settings.evaluation.baseline_tasks == len(cells)
    assert len(ran) == base.n == len(cells) * k  # the same k as every later point
    evaluated = {r.task_id for r in store.rollouts("r", iteration=0, purpose="eval")}
    first = spread(store.tasks("r", split=Split.HELDOUT, status=TaskStatus.VALID))[:len(cells)]
    assert evaluated == {t.id for t in first}  # the prefix of the one order every budget cuts from
    assert {(t.family, t.difficulty) for t in first} == cells  # one task of every family and level
    settings.evaluation.baseline_tasks = 0  # the whole set, by setting (as before)
    later = evaluate_heldout(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                             new_rollout=new_rollout)
    assert later.tasks == len(tasks) and len(ran) == len(tasks) * k  # the rest drawn, the prefix not run twice


def test_the_dev_set_baseline_is_its_balanced_prefix_unless_every_point_is_whole(
        settings: Settings, store: Store) -> None:
    """Issue 49: the whole dev set at the baseline (132 rollouts) held back the first training step."""
    from appliance.tasks.devset import category

    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    ran: list[str] = []
    args = {"harness": "builtin", "run_pending": _runner(store, ran), "new_rollout": new_rollout,
            "validate": _validate_all(store)}
    base = evaluate_devset(store, settings, "r", 0, 0, **args)
    ev = settings.evaluation
    assert base is not None and base.tasks == 10  # was the whole set: 66
    assert ev.baseline_devset_tasks == 10
    assert len(ran) == base.n == 10 * ev.samples_per_task
    dev = store.tasks("r", split=Split.DEV, status=TaskStatus.VALID)
    assert {r.task_id for r in store.rollouts("r", iteration=0, purpose="eval")} == {t.id for t in spread(dev)[:10]}
    assert len({category(t.family) for t in spread(dev)[:10]}) >= 4  # balanced over the categories
    ev.devset_min_tasks = 1000  # the learning bench's "the whole dev set at every point": the baseline too
    whole = evaluate_devset(store, settings, "r", 0, 0, **args)
    assert whole is not None and whole.tasks == len(store.tasks("r", split=Split.DEV)) == 66


def test_a_task_validation_left_proposed_is_tried_once_per_evaluation_and_not_evaluated(
        settings: Settings, store: Store) -> None:
    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    tasks = []
    for level in (2, 3):
        for spec in synthesize("files", level, 4, seed="ev", split="heldout"):  # none validated yet
            store.add_task(Task(f"r.{spec.id}", "r", "files", level, "procedural", Split.HELDOUT,
                                TaskStatus.PROPOSED, spec.to_spec()))
            tasks.append(store.get_task(f"r.{spec.id}"))
    stuck = spread(tasks)[0]
    tried: list[str] = []

    def validate(batch: list[Task]) -> None:  # the machine fails the first task's validation: it stays proposed
        for t in batch:
            tried.append(t.id)
            if t.id != stuck.id:
                store.set_task_status(t.id, TaskStatus.VALID)

    settings.evaluation.baseline_tasks = 4
    ran: list[str] = []
    result = evaluate_heldout(store, settings, "r", 0, 0, harness="builtin", run_pending=_runner(store, ran),
                              new_rollout=new_rollout, validate=validate)
    assert tried.count(stuck.id) == 1 and len(tried) == 4  # the prefix's four, the stuck one once
    assert result.tasks == 3 and stuck.id not in {r.task_id for r in store.rollouts("r", purpose="eval")}
