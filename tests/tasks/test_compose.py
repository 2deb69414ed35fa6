"""Composition: two validated tasks as one two-part request, validated and judged like any task."""

from __future__ import annotations

import random

import pytest

from appliance.config import Settings
from appliance.curriculum import synthesize_round
from appliance.sandbox import Sandbox
from appliance.schemas import Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec, verify_workspace
from appliance.tasks.compose import compose, compose_round
from appliance.tasks.families import synthesize
from appliance.tasks.validate import validate_many, write_workspace


def parts() -> list[TaskSpec]:
    return [s for s in synthesize("text", 2, 4, seed="cx") + synthesize("files", 2, 4, seed="cx")
            if "the only " not in s.instruction]


def test_a_composite_asks_for_both_and_refuses_what_cannot_share_a_workspace() -> None:
    a, b = parts()[:2]
    spec = compose(a, b, random.Random(0))
    assert spec is not None and a.instruction.strip() in spec.instruction and b.instruction.strip() in spec.instruction
    assert spec.instruction.index(a.instruction.strip()) < spec.instruction.index(b.instruction.strip())
    assert spec.files == {**a.files, **b.files} and spec.meta["composed_of"] == [a.id, b.id]
    assert spec.limits.max_turns == a.limits.max_turns + b.limits.max_turns and spec.verify_lang == "bash"
    assert compose(a, a, random.Random(0)) is None  # a path in both
    assert compose(spec, b, random.Random(0)) is None  # one level of composition
    question = TaskSpec(**{**b.to_spec(), "answer": True, "limits": b.limits})
    assert compose(a, question, random.Random(0)) is None
    described = next(s for s in synthesize("text", 2, 12, seed="only") if "the only " in s.instruction)
    assert compose(a, described, random.Random(0)) is None  # the other part's files would make "the only" untrue
    made = compose_round(parts(), 3, random.Random(1), set())
    assert len(made) == 3 and len({s.id for s in made}) == 3


def test_synthesis_composes_frontier_tasks_only_when_asked(settings: Settings, store: Store) -> None:
    run = store.create_run("r", {}).id
    for s in synthesize("files", 2, 4, seed="pool") + synthesize("files", 3, 2, seed="pool"):
        store.add_task(Task(f"{run}.{s.id}", run, s.family, s.difficulty, s.source, Split.TRAIN, TaskStatus.VALID,
                            s.to_spec(), iteration=0))
    settings.loop.start_level = 2
    settings.loop.compose = 0
    store.start_iteration(run, 1, 0)
    assert "composed" not in synthesize_round(store, settings, run, 1, ["files"])["made"]
    settings.loop.compose = 2
    store.start_iteration(run, 2, 0)
    assert synthesize_round(store, settings, run, 2, ["files"])["made"]["composed"] == 2
    made = [t for t in store.tasks(run, iteration=2) if t.spec["meta"].get("round") == "composed"]
    assert len(made) == 2 and all(t.status == TaskStatus.PROPOSED and t.difficulty == 2 for t in made)


@pytest.mark.slow
def test_a_composite_validates_and_half_done_is_a_failure(sandbox_settings: Settings, tmp_path) -> None:
    specs = compose_round(parts(), 4, random.Random(3), set())
    results = validate_many(sandbox_settings, specs)
    # parts that collide (one counts the files the other adds) are refused, as any task whose reference fails
    assert all(v.ok or (v.reason or "").startswith("reference solution fails") for v in results), results
    valid = [s for s, v in zip(specs, results) if v.ok]
    assert valid
    spec = valid[0]
    # the reference of the first part alone, run in a sandbox: a failure, with the share of parts passed
    first = next(p for p in parts() if p.id == spec.meta["composed_of"][0])
    half = TaskSpec.from_spec(spec.to_spec() | {"solution": first.solution})
    (v,) = validate_many(sandbox_settings, [half])
    assert not v.ok and (v.reason or "").startswith("reference solution fails") and "parts passed: 1 of 2" in v.reason
    # the same, as practice judges a rollout: a failure whose reward is the share of parts passed
    work = tmp_path / "w"
    work.mkdir()
    write_workspace(spec, work)
    with Sandbox.start(sandbox_settings, workspace=work) as sb:
        if spec.setup.strip():
            assert sb.exec(spec.setup, timeout=30).exit_code == 0
        assert sb.exec(first.solution, timeout=30).exit_code == 0
    verdict = verify_workspace(sandbox_settings, spec, work, archive=sb.copied_out)
    assert verdict.error is None and not verdict.passed and verdict.score == 0.5, verdict
