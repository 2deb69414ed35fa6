"""`appliance eval`'s library: the same figures as the loop's own held-out evaluation, stored apart from runs."""

from __future__ import annotations

from appliance.benchmark import evaluate_set
from appliance.config import Settings
from appliance.evaluate import evaluate_heldout
from appliance.practice import new_rollout
from appliance.schemas import Outcome, Rollout, Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.families import synthesize


# What each (task, sample) comes to, whichever path runs it: a pass, a failure, or the machine's failure.
def _rule(spec: TaskSpec, j: int) -> Outcome:
    h = sum(spec.id.encode()) + j
    return Outcome.INFRA_ERROR if h % 7 == 0 else Outcome.SUCCESS if h % 3 == 0 else Outcome.FAILURE


def _finish(store: Store, spec: TaskSpec, rid: str, seen: dict[str, int]) -> None:
    j = seen.get(spec.id, 0)
    seen[spec.id] = j + 1
    store.start_rollout(rid)
    outcome = _rule(spec, j)
    store.finish_rollout(rid, outcome, float(outcome == Outcome.SUCCESS))


def test_eval_gives_the_loops_figures_on_the_same_tasks(settings: Settings, store: Store) -> None:
    specs = [s for fam in ("files", "text") for lvl in (2, 3)
             for s in synthesize(fam, lvl, 3, seed="b", split="heldout")]
    settings.evaluation.samples_per_task = 3
    settings.evaluation.baseline_tasks = 0  # the whole set, as `appliance eval` measures it
    store.create_run("r", {})
    store.start_iteration("r", 0, 0)
    for s in specs:
        t = Task(f"r.{s.id}", "r", s.family, s.difficulty, "procedural", Split.HELDOUT, TaskStatus.PROPOSED,
                 s.to_spec())
        store.add_task(t)
        store.set_task_status(t.id, TaskStatus.VALID)
    seen_loop: dict[str, int] = {}
    loop = evaluate_heldout(store, settings, "r", 0, 0, harness="builtin", new_rollout=new_rollout,
                            run_pending=lambda work: [_finish(store, s, rid, seen_loop) for s, rid in work])
    seen_eval: dict[str, int] = {}

    def run(work: list[tuple[TaskSpec, Rollout]]) -> None:
        for s, r in work:
            _finish(store, s, r.id, seen_eval)

    ours = evaluate_set(store, specs, policy_version=0, k=3, harness="builtin", run=run, eval_id="e1")
    assert loop.n > 0 and 0 < loop.passed < loop.n  # the rule gives passes, failures and infra errors
    assert (ours["passed"], ours["n"], ours["low"], ours["high"], ours["by_level"]) == \
        (loop.passed, loop.n, loop.low, loop.high, loop.by_level)
    assert ours["infra_errors"] == sum(_rule(s, j) == Outcome.INFRA_ERROR for s in specs for j in range(3)) > 0
    assert set(ours["by_family"]) == {"files", "text"}
    # stored apart from every run: no run's rollouts or tasks hold them
    assert all(r.run_id is None and r.purpose == "eval" and r.group_id == "e1"
               for r in (store.get_rollout(x["id"]) for x in ours["rollouts"]))
    assert len(store.rollouts("r")) == len(specs) * 3 and len(store.tasks("r")) == len(specs)


def test_an_evaluation_is_stored_with_its_summary(store: Store) -> None:
    store.add_eval_set("e2", paths=["/sets/a"], policy_version=3, harness="builtin", k=2,
                       summary={"pass_at_1": 0.5, "n": 4})
    (row,) = store.eval_sets()
    assert row["id"] == "e2" and row["paths"] == ["/sets/a"] and row["policy_version"] == 3
    assert row["summary"]["pass_at_1"] == 0.5
