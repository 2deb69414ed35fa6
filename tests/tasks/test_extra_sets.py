"""`evaluation.extra_sets`: the user's task sets measured at every EVALUATE of a run, validated by oracle once,
stored per iteration and policy version, never practised or trained on; their curve in the report, the HTML
page (the TUI's is tests/tui/test_extra_sets_curve.py). The phase's validation, loading and rollout runner
stand in (their work is tested in their rooms: test_harbor*, test_benchmark)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.diagnosis import render_markdown
from appliance.errors import ApplianceError
from appliance.evaluate import extra_set_id, extra_sets_block, summarize_set
from appliance.loop import Loop
from appliance.phases import evaluate as evaluate_phase
from appliance.report_html import render_page
from appliance.schemas import CapabilityReport, Outcome, TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.families import synthesize
from appliance.testing import FakeEngine

MINE = Path("/sets/mine")
GONE = Path("/sets/gone")


def _loop(settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch, passes: dict[int, set[str]],
          loads: list[tuple[Path, bool]], specs: list[TaskSpec]) -> Loop:
    settings.loop.families = ["files"]
    settings.evaluation.devset = False
    settings.evaluation.extra_sets = [MINE, GONE]
    settings.evaluation.extra_samples_per_task = 3
    loop = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()), log=lambda _: None)

    def validate(_context, tasks):
        for t in tasks:
            store.set_task_status(t.id, TaskStatus.VALID)

    def run_pending(_context, work):
        for spec, rid in work:
            r = store.get_rollout(rid)
            if r.outcome is not None:
                continue
            store.start_rollout(rid)
            ok = spec.id in passes.get(r.iteration or 0, set()) and rid.endswith(".0")
            store.finish_rollout(rid, Outcome.SUCCESS if ok else Outcome.FAILURE, float(ok))

    def load_set(_context, harness, path, oracle):
        loads.append((path, oracle))
        if path == GONE:
            raise ApplianceError(f"{path} does not exist", "pass task directories or folders of them")
        if oracle:  # the oracle refuses the last task
            return specs[:-1], [{"path": f"/sets/mine/{specs[-1].id}", "reason": "reference solution fails"}]
        return specs[:-1] if not passes.get(-1) else specs[:1], []  # passes[-1]: a task went away since

    monkeypatch.setattr(evaluate_phase, "validate_tasks", validate)
    monkeypatch.setattr(evaluate_phase, "run_pending", run_pending)
    monkeypatch.setattr(evaluate_phase, "load_set", load_set)
    return loop


def test_extra_sets_are_validated_once_measured_each_iteration_and_never_trained_on(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = synthesize("files", 2, 3, seed="extra")
    loads: list[tuple[Path, bool]] = []
    passes = {1: {specs[0].id, specs[1].id}}  # the base passes nothing; version 1 passes two tasks once in 3
    loop = _loop(settings, store, monkeypatch, passes, loads, specs)
    run = loop.run.id
    for it in (0, 1):
        store.start_iteration(run, it, it)
        loop.context.engine._version = it  # what a sync to version `it` leaves served
        evaluate_phase.evaluate(loop.context, it)
    # validated by oracle at the first evaluation only; a set that cannot be read is skipped, said, each time
    assert loads == [(MINE, True), (GONE, True), (MINE, False), (GONE, True)]
    rows = store.run_eval_sets(run)
    assert [(r["name"], r["iteration"], r["policy_version"], r["k"]) for r in rows] == \
        [(str(MINE), 0, 0, 3), (str(MINE), 1, 1, 3)]
    first, second = (r["summary"] for r in rows)
    assert (first["passed"], first["n"], first["tasks"]) == (0, 6, 2)
    assert (second["passed"], second["n"]) == (2, 6)
    assert second == summarize_set(store, extra_set_id(run, 1, str(MINE)), specs[:2], 3) | {
        k: second[k] for k in ("name", "iteration", "policy_version", "valid", "excluded", "missing")}
    assert second["excluded"] == [{"path": f"/sets/mine/{specs[2].id}", "reason": "reference solution fails"}]
    said = [e.message for e in store.events(run) if e.kind == "evaluate"]
    assert any(f"task set {MINE}: pass@1 33.3% [" in m and "(2/6) over 2 tasks x 3" in m for m in said)
    assert sum(f"task set {GONE} not evaluated: {GONE} does not exist" in m for m in said) == 2
    # never practised or trained on: the rollouts belong to no run, the tasks are none of the run's
    ours = [store.get_rollout(x["id"]) for s in (first, second) for x in s["rollouts"]]
    assert len(ours) == 12 and all(r.run_id is None and r.purpose == "eval" for r in ours)
    assert not {r.id for r in ours} & {r.id for r in store.rollouts(run)}
    assert not {s.id for s in specs} & {t.id for t in store.tasks(run)}
    # the report's block, its Markdown and the HTML page's curve
    (block,) = extra_sets_block(store, run, 1)
    assert block["name"] == str(MINE) and [t["pass_at_1"] for t in block["trend"]] == [0.0, 2 / 6]
    report = CapabilityReport(run_id=run, iteration=1, extra_sets=[block])
    assert CapabilityReport.of(report.as_dict()).extra_sets == [block]
    md = render_markdown(report)
    assert f"## Task set {MINE}: pass@1 with 95 % interval (never trained on)" in md
    assert "33.3% [" in md and "(2/6) over 2 tasks x k=3; 1 excluded at its validation" in md
    page = render_page(store, run, report, md)
    assert 'id="extra-sets"' in page and f"task set {MINE}" in page and "iteration 1: 33.3% [" in page


def test_a_task_gone_from_a_set_since_its_validation_is_named_not_silently_dropped(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = synthesize("files", 2, 3, seed="extra")
    loop = _loop(settings, store, monkeypatch, {-1: {"gone"}}, [], specs)
    settings.evaluation.extra_sets = [MINE]
    for it in (0, 1):
        store.start_iteration(loop.run.id, it, it)
        evaluate_phase.evaluate(loop.context, it)
    first, second = (r["summary"] for r in store.run_eval_sets(loop.run.id))
    assert first["missing"] == [] and second["missing"] == [specs[1].id] and second["tasks"] == 1


def test_a_runs_extra_set_and_appliance_eval_give_the_same_figures_on_the_same_outcomes(
        settings: Settings, store: Store) -> None:
    """The loop's evaluation of an extra set and `appliance eval` on the same tasks and the same outcomes (a
    pass, a failure or the machine's failure per task and sample) come to the same figures."""
    from appliance.benchmark import evaluate_set
    from appliance.evaluate import evaluate_extra_sets
    from appliance.practice import new_rollout

    specs = [s for lvl in (2, 3) for s in synthesize("text", lvl, 3, seed="same")]

    def outcome(spec_id: str, rid: str) -> Outcome:
        h = sum(spec_id.encode()) + int(rid.rsplit(".", 1)[1])
        return Outcome.INFRA_ERROR if h % 7 == 0 else Outcome.SUCCESS if h % 3 == 0 else Outcome.FAILURE

    def finish(spec: TaskSpec, rid: str) -> None:
        store.start_rollout(rid)
        o = outcome(spec.id, rid)
        store.finish_rollout(rid, o, float(o == Outcome.SUCCESS))

    settings.evaluation.extra_sets = [MINE]
    settings.evaluation.extra_samples_per_task = 3
    store.create_run("r", {})
    (loop,) = evaluate_extra_sets(store, settings, "r", 0, 0, harness="builtin", new_rollout=new_rollout,
                                  run_pending=lambda work: [finish(s, rid) for s, rid in work],
                                  load=lambda _path, _oracle: (specs, []))
    ours = evaluate_set(store, specs, policy_version=0, k=3, harness="builtin", eval_id="e1",
                        run=lambda work: [finish(s, r.id) for s, r in work])
    assert 0 < loop["passed"] < loop["n"] and loop["infra_errors"] > 0  # passes, failures and infra errors
    for key in ("passed", "n", "low", "high", "tasks", "k", "by_level", "by_family", "infra_errors"):
        assert loop[key] == ours[key], key


def test_a_set_whose_every_task_failed_validation_is_said_so_not_a_pass_rate_of_zero(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _loop(settings, store, monkeypatch, {}, [], [])
    settings.evaluation.extra_sets = [MINE]
    monkeypatch.setattr(evaluate_phase, "load_set",
                        lambda *_a: ([], [{"path": "/sets/mine/t", "reason": "reference solution fails"}]))
    store.start_iteration(loop.run.id, 0, 0)
    evaluate_phase.evaluate(loop.context, 0)
    said = [e.message for e in store.events(loop.run.id) if "task set" in e.message]
    assert said == [f"iteration 0: task set {MINE}: no task to evaluate; 1 task(s) excluded at its validation"]
    assert extra_sets_block(store, loop.run.id, 0)[0]["n"] == 0  # stored: the report says how many were left out
