"""Held-out evaluation: pass@1 with a 95 % Wilson interval, k samples per task, inside a time budget.

The one place that says what "held-out pass@1" is; the loop's EVALUATE phase, the report, the learning
curve, the CLI and the TUI all read it from here.

    pass@1 = successes / rollouts over the held-out tasks, k rollouts each (`evaluation.samples_per_task`);
    interval = the Wilson score interval at 95 % over those rollouts (the k samples of one task are not
    independent, so the interval is a little narrow when k > 1; it is still the honest order of magnitude)

Budget: evaluation may take `evaluation.budget_share` of an iteration. At iteration i > 0 the rest of the
iteration is what ran before EVALUATE (now - the iteration's start), so evaluation may take share / (1 -
share) of that; the cost of one rollout is measured on the previous evaluation. Tasks are taken in a fixed
order that spreads over families and levels, so a smaller budget evaluates a prefix of the same list, never
a different sample. The baseline (iteration 0) evaluates the prefix of `evaluation.baseline_tasks` (0: every
held-out task): one task per family and level by default, with the same k, rollout code and sampling as every
later point, so the comparison stays honest while the first trained point comes sooner (the base model's
rollouts are nearly all cut at the turn limit: the whole set cost most of a newcomer's first hour). Infra
errors are no evidence: they count in neither n nor passed.

The transfer dev set (`appliance.tasks.devset`, split `dev`) is measured the same way, after the held-out
set, with the same k, rollout code and interval, per category (`evaluate_devset`). Its results live in
metrics (`dev_*`), not in `evals`, so every reader of the held-out cells stays held-out only. Budget: the
baseline evaluates the prefix of max(`evaluation.baseline_devset_tasks`, `devset_min_tasks`) of `spread(...)`
(0: all of it), so the dev set does not hold back the first training step; later iterations give it what the
held-out set left of the same allowance (share / (1 - share) of the time before EVALUATE), all of it when that
fits, else a prefix of `spread(...)` (balanced over category and difficulty) of at least
`evaluation.devset_min_tasks`.

The task sets the user brings (`evaluation.extra_sets`, `evaluate_extra_sets`) come last: validated by oracle
at the run's first evaluation of each set, then every valid task, k rollouts each, each time (outside the
budget), pass@1 with the same interval (`summarize_set`, which `appliance eval` uses too). Their rollouts
belong to no run and their results live in `eval_sets`, so neither the loop's training nor any reader of the
held-out cells ever sees them.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config import Settings
from appliance.errors import ApplianceError, EvaluationError
from appliance.schemas import Outcome, Rollout, Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks.difficulty import wilson

if TYPE_CHECKING:
    from appliance.tasks import TaskSpec

__all__ = ["PassAt1", "budget_tasks", "devset_curve", "evaluate_devset", "evaluate_extra_sets", "evaluate_heldout",
           "extra_set_curves", "extra_sets_block", "learning_curve", "pass_at_1", "summarize_set", "wilson"]


@dataclass
class PassAt1:
    passed: int
    n: int
    low: float
    high: float
    tasks: int = 0
    k: int = 1
    by_level: dict[str, dict[str, float]] = field(default_factory=dict)  # per category for the dev set

    @property
    def pass_at_1(self) -> float:
        return self.passed / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pass_at_1": self.pass_at_1}

    def describe(self) -> str:
        return f"{self.pass_at_1:.1%} [{self.low:.1%}, {self.high:.1%}] ({self.passed}/{self.n})"


def pass_at_1(cells: list[dict[str, Any]], *, k: int = 1, tasks: int = 0, key: str = "difficulty") -> PassAt1:
    """Pool rows of (key, n, passed) (the store's `evals` rows) into pass@1 with its interval, and per key."""
    n = sum(int(c["n"]) for c in cells)
    passed = sum(int(c["passed"]) for c in cells)
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for c in cells:
        by[str(c[key])][0] += int(c["passed"])
        by[str(c[key])][1] += int(c["n"])
    by_level = {}
    for level, (p, m) in sorted(by.items()):
        lo, hi = wilson(p, m)
        by_level[level] = {"passed": p, "n": m, "pass_at_1": p / m if m else 0.0, "low": lo, "high": hi}
    low, high = wilson(passed, n)
    return PassAt1(passed, n, low, high, tasks, k, by_level)


def learning_curve(store: Store, run_id: str) -> list[tuple[int, PassAt1]]:
    """(iteration, pass@1 with interval) per evaluated iteration."""
    by_iter: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in store.evals(run_id):
        by_iter[e["iteration"]].append(e)
    tasks = dict(store.metric_series(run_id, "heldout_tasks"))  # step = iteration (evaluate_heldout writes them)
    ks = dict(store.metric_series(run_id, "heldout_k"))
    return [(it, pass_at_1(rows, k=int(ks.get(it, 1)), tasks=int(tasks.get(it, 0))))
            for it, rows in sorted(by_iter.items())]


def spread(tasks: list[Task]) -> list[Task]:
    """Tasks round-robin over (level, family) cells, each cell in id order: any prefix is balanced."""
    cells: dict[tuple[int, str], list[Task]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: t.id):
        cells[(t.difficulty, t.family)].append(t)
    out: list[Task] = []
    keys, i = sorted(cells), 0
    while len(out) < len(tasks):
        for key in keys:
            if i < len(cells[key]):
                out.append(cells[key][i])
        i += 1
    return out


def rollout_cost_s(rollouts: list[Rollout]) -> float | None:
    """Wall seconds per rollout of an evaluation (its span over its count: concurrency included)."""
    done = [r for r in rollouts if r.started_at and r.finished_at]
    if not done:
        return None
    span = max(r.finished_at or 0.0 for r in done) - min(r.started_at or 0.0 for r in done)  # all set: see done
    return max(span, 0.0) / len(done)


def budget_tasks(tasks: list[Task], settings: Settings, *, elapsed_s: float | None, cost_s: float | None) -> list[Task]:
    """The prefix of `spread(tasks)` that fits the budget; all tasks when there is nothing to measure by."""
    ordered = spread(tasks)
    ev = settings.evaluation
    if elapsed_s is None or cost_s is None or cost_s <= 0 or ev.budget_share >= 1:
        return ordered
    allowed_s = elapsed_s * ev.budget_share / (1 - ev.budget_share)
    fits = int(allowed_s // (cost_s * ev.samples_per_task))
    return ordered[: max(ev.min_tasks, fits)]


def evaluate_heldout(store: Store, settings: Settings, run_id: str, iteration: int, policy_version: int, *,
                     harness: str, run_pending: Callable[[list[tuple[Any, str]]], None],
                     new_rollout: Callable[..., Rollout], validate: Callable[[list[Task]], None] | None = None,
                     clock: Callable[[], float] = time.time) -> PassAt1:
    """The EVALUATE phase's held-out work: the budgeted tasks (validated first, those only, by `validate`, the
    loop's agent-free validation), k rollouts each, then the per-cell results in `evals` (re-running replaces
    them) and pass@1 with its interval."""
    k = settings.evaluation.samples_per_task
    elapsed = cost = None
    if iteration > 0:
        started = store.get_iteration(run_id, iteration).started_at
        elapsed = max(0.0, clock() - started)
        cost = rollout_cost_s(_eval_rollouts(store, run_id, iteration - 1))

    def choose(tasks: list[Task]) -> list[Task]:
        chosen = budget_tasks(tasks, settings, elapsed_s=elapsed, cost_s=cost)
        return baseline_prefix(chosen, settings.evaluation.baseline_tasks) if iteration == 0 else chosen

    chosen = validated_choice(store, run_id, Split.HELDOUT, choose, validate)
    cells = _sample(store, run_id, iteration, policy_version, chosen, k, harness, run_pending, new_rollout)
    for (family, level), (n, passed) in cells.items():
        store.set_eval(run_id, iteration, policy_version, family, level, n, passed)
    result = pass_at_1([{"difficulty": lvl, "n": n, "passed": p} for (_, lvl), (n, p) in cells.items()],
                       k=k, tasks=len(chosen))
    store.set_metrics(run_id, iteration, {"heldout_pass@1": result.pass_at_1, "heldout_low": result.low,
                                          "heldout_high": result.high, "heldout_tasks": float(len(chosen)),
                                          "heldout_k": float(k)})
    return result


def validated_choice(store: Store, run_id: str, split: Split, choose: Callable[[list[Task]], list[Task]],
                     validate: Callable[[list[Task]], None] | None) -> list[Task]:
    """What `choose` picks from the split's tasks, each validated before it is evaluated; only those are
    validated (a baseline's prefix needs no verdict on the rest: a later, larger choice validates its own). A
    task validation rejects makes room for the next of the order; one an infra failure left proposed is not
    evaluated (the next evaluation validates it again)."""
    tried: set[str] = set()
    for _ in range(3):  # a rejection moves the prefix by one task: a second pass validates its replacement
        candidates = [t for t in store.tasks(run_id, split=split)
                      if t.status in (TaskStatus.VALID, TaskStatus.PROPOSED)]
        proposed = [t for t in choose(candidates) if t.status == TaskStatus.PROPOSED and t.id not in tried]
        if not proposed or validate is None:
            break  # nothing new to validate (an infra failure's tasks are tried once per evaluation)
        validate(proposed)
        tried |= {t.id for t in proposed}
    return choose(store.tasks(run_id, split=split, status=TaskStatus.VALID))


def baseline_prefix(ordered: list[Task], size: int) -> list[Task]:
    """The baseline's part of a `spread` order: its first `size` tasks (0: all of them)."""
    return ordered[:size] if size > 0 else ordered


def _eval_rollouts(store: Store, run_id: str, iteration: int, task_ids: set[str] | None = None) -> list[Rollout]:
    return [r for r in store.rollouts(run_id, iteration=iteration, purpose="eval")
            if r.outcome != Outcome.INFRA_ERROR and (task_ids is None or r.task_id in task_ids)]


def _sample(store: Store, run_id: str, iteration: int, policy_version: int, chosen: list[Task], k: int, harness: str,
            run_pending: Callable[[list[tuple[Any, str]]], None],
            new_rollout: Callable[..., Rollout]) -> dict[tuple[str, int], list[int]]:
    """k eval rollouts of each chosen task (resumable: finished ones are not run again); (family, level) ->
    [n, passed] over the finished ones that are evidence."""
    from appliance.tasks import TaskSpec

    work = []
    for task in chosen:
        for j in range(k):
            # the first sample keeps the id the loop always used, so a run resumed across versions matches
            rid = f"{task.id}.eval{iteration}" + (f".{j}" if j else "")
            r = new_rollout(store, harness=harness, policy_version=policy_version, run_id=run_id, task_id=task.id,
                            iteration=iteration, purpose="eval", rollout_id=rid)
            if r.outcome == Outcome.INFRA_ERROR:  # an earlier attempt's: the machine failed it, not the policy
                store.redraw_rollout(r.id)
            work.append((TaskSpec.of(task), r.id))
    run_pending(work)
    cells: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    by_task = {t.id: t for t in chosen}
    infra = []
    for r in store.rollouts(run_id, iteration=iteration, purpose="eval"):
        evaluated = by_task.get(r.task_id or "")
        if evaluated is None or r.outcome is None:
            continue
        if r.outcome == Outcome.INFRA_ERROR:
            infra.append(r)
            continue
        cell = cells[(evaluated.family, evaluated.difficulty)]
        cell[0] += 1
        cell[1] += r.outcome == Outcome.SUCCESS
    if work and not cells:
        # No evidence is not a pass@1 of 0: recording 0 of 0 would draw a collapse on the curve and move on.
        # The phase fails instead; its next attempt redraws these (above), and `loop.phase_attempts` bound it.
        first = infra[0].error if infra else "no rollout finished"
        raise EvaluationError(
            f"evaluation of iteration {iteration}: all {len(infra)} of {len(work)} rollouts ended in infra errors "
            f"(the first: {first})", "see `appliance doctor` and logs/ for the engine and Podman; the next attempt "
            "draws them again")
    return cells


# --- the transfer dev set ---------------------------------------------------------------------------
def devset_budget(tasks: list[Task], settings: Settings, *, allowed_s: float | None,
                  cost_s: float | None) -> list[Task]:
    """The prefix of `spread(tasks)` that fits `allowed_s` (all of it when nothing limits), at least
    `evaluation.devset_min_tasks`."""
    ordered = spread(tasks)
    ev = settings.evaluation
    if allowed_s is None or cost_s is None or cost_s <= 0 or ev.budget_share >= 1:
        return ordered
    fits = int(max(0.0, allowed_s) // (cost_s * ev.samples_per_task))
    return ordered[: max(ev.devset_min_tasks, fits)]


def evaluate_devset(store: Store, settings: Settings, run_id: str, iteration: int, policy_version: int, *,
                    harness: str, run_pending: Callable[[list[tuple[Any, str]]], None],
                    new_rollout: Callable[..., Rollout], validate: Callable[[list[Task]], None],
                    clock: Callable[[], float] = time.time) -> PassAt1 | None:
    """The dev set's part of EVALUATE, after `evaluate_heldout`: fix the set for the run (once), validate the
    budgeted tasks still proposed (`validate`, the loop's agent-free validation), k rollouts each, and
    pass@1 with its interval, per category, stored as `dev_*` metrics. None when `evaluation.devset` is off."""
    from appliance.tasks.devset import category, fix_devset

    if not settings.evaluation.devset:
        return None
    fix_devset(store, run_id, settings.evaluation.devset_batch)
    k = settings.evaluation.samples_per_task
    allowed = cost = None
    if iteration > 0:
        share = settings.evaluation.budget_share
        heldout = {t.id for t in store.tasks(run_id, split=Split.HELDOUT)}
        spent = _span(_eval_rollouts(store, run_id, iteration, heldout))  # the held-out evaluation just run
        before = max(0.0, clock() - store.get_iteration(run_id, iteration).started_at - spent)
        allowed = before * share / (1 - share) - spent if share < 1 else None
        cost = rollout_cost_s(_eval_rollouts(store, run_id, iteration - 1))

    def choose(tasks: list[Task]) -> list[Task]:
        chosen = devset_budget(tasks, settings, allowed_s=allowed, cost_s=cost)
        if iteration > 0:
            return chosen
        ev = settings.evaluation
        return baseline_prefix(chosen, ev.baseline_devset_tasks and max(ev.baseline_devset_tasks, ev.devset_min_tasks))

    chosen = validated_choice(store, run_id, Split.DEV, choose, validate)
    cells = _sample(store, run_id, iteration, policy_version, chosen, k, harness, run_pending, new_rollout)
    rows = [{"category": category(f), "n": n, "passed": p} for (f, _), (n, p) in cells.items()]
    result = pass_at_1(rows, k=k, tasks=len(chosen), key="category")
    metrics = {"dev_pass@1": result.pass_at_1, "dev_low": result.low, "dev_high": result.high,
               "dev_tasks": float(len(chosen)), "dev_k": float(k)}
    for cat, c in result.by_level.items():
        for what in ("n", "passed", "low", "high"):  # the report reads these (diagnosis cannot import evaluate)
            metrics[f"dev_{what}.{cat}"] = c[what]
    store.set_metrics(run_id, iteration, metrics)
    return result


def _span(rollouts: list[Rollout]) -> float:
    cost = rollout_cost_s(rollouts)
    return cost * len([r for r in rollouts if r.started_at and r.finished_at]) if cost else 0.0


def devset_curve(store: Store, run_id: str) -> list[tuple[int, PassAt1]]:
    """(iteration, dev-set pass@1 with interval and per category) per iteration the dev set was evaluated."""
    by_iter: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for cat in _categories(store, run_id):
        ns = dict(store.metric_series(run_id, f"dev_n.{cat}"))
        ps = dict(store.metric_series(run_id, f"dev_passed.{cat}"))
        for it, n in ns.items():
            by_iter[it].append({"category": cat, "n": n, "passed": ps.get(it, 0)})
    tasks = dict(store.metric_series(run_id, "dev_tasks"))
    ks = dict(store.metric_series(run_id, "dev_k"))
    return [(it, pass_at_1(by_iter.get(it, []), k=int(ks.get(it, 1)), tasks=int(t), key="category"))
            for it, t in sorted(tasks.items())]


def _categories(store: Store, run_id: str) -> list[str]:
    from appliance.tasks.devset import CATEGORIES, category

    seen = {category(t.family) for t in store.tasks(run_id, split=Split.DEV)}
    return sorted(seen | set(CATEGORIES))


# --- the task sets the user brings (evaluation.extra_sets) ---------------------------------------------------
# (specs, exclusions as {"path", "reason"}) of one set; True: validated by oracle (the run's first evaluation)
LoadSet = Callable[[Path, bool], "tuple[list[TaskSpec], list[dict[str, str]]]"]


def summarize_set(store: Store, eval_id: str, specs: list[TaskSpec], k: int) -> dict[str, Any]:
    """pass@1 with its interval over the rollouts `{eval_id}.{task}.{j}` (k a task), per level and family;
    infra errors count in neither n nor passed and are counted apart. `appliance eval`'s figures and an extra
    set's in the loop are this one function."""
    cells: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    rows, infra = [], 0
    for spec in specs:
        for j in range(k):
            r = store.get_rollout(f"{eval_id}.{spec.id}.{j}")
            rows.append({"id": r.id, "task": spec.id, "outcome": r.outcome, "reward": r.reward, "error": r.error})
            if r.outcome is None:
                continue
            if r.outcome == Outcome.INFRA_ERROR:  # no evidence about the policy
                infra += 1
                continue
            cell = cells[(spec.family, spec.difficulty)]
            cell[0] += 1
            cell[1] += r.outcome == Outcome.SUCCESS
    flat = [{"family": f, "difficulty": lvl, "n": n, "passed": p} for (f, lvl), (n, p) in sorted(cells.items())]
    overall = pass_at_1(flat, k=k, tasks=len(specs))
    return {"id": eval_id, **overall.as_dict(), "infra_errors": infra,
            "by_family": pass_at_1(flat, key="family").by_level, "rollouts": rows}


def extra_set_id(run_id: str, iteration: int, name: str) -> str:
    """A run's evaluation of one extra set (its rollouts' group and id prefix): the set as a short hash, since
    the id names workspace folders and the set's name is a path."""
    return f"{run_id}.x{iteration}.{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def evaluate_extra_sets(store: Store, settings: Settings, run_id: str, iteration: int, policy_version: int, *,
                        harness: str, run_pending: Callable[[list[tuple[Any, str]]], None],
                        new_rollout: Callable[..., Rollout], load: LoadSet) -> list[dict[str, Any]]:
    """EVALUATE's last part: each set of `evaluation.extra_sets`, its valid tasks k times each (resumable:
    finished rollouts are not run again), stored as the run's `eval_sets` row of the iteration. A set is
    validated by oracle at the run's first evaluation of it; later ones load it again (environments are cached
    by content) and keep the tasks that passed then, so every point of its curve measures the same tasks (a
    task that has gone since is named under "missing"). A set that cannot be read is skipped, with why
    (`error`), not the phase's failure: the held-out curve must not stop for it."""
    ev = settings.evaluation
    k = ev.extra_samples_per_task or ev.samples_per_task
    out: list[dict[str, Any]] = []
    for path in ev.extra_sets:
        name = str(path)
        earlier = store.run_eval_sets(run_id, name)
        try:
            if earlier:
                first = earlier[0]["summary"]
                valid, excluded = list(first["valid"]), list(first["excluded"])
                specs = [s for s in load(Path(path), False)[0] if s.id in valid]
            else:
                specs, excluded = load(Path(path), True)
                valid = [s.id for s in specs]
        except ApplianceError as e:
            out.append({"name": name, "iteration": iteration, "error": e.message})
            continue
        eval_id = extra_set_id(run_id, iteration, name)
        work = []
        for spec in specs:
            for j in range(k):
                r = new_rollout(store, harness=harness, policy_version=policy_version, task_id=spec.id,
                                group_id=eval_id, iteration=iteration, purpose="eval",
                                rollout_id=f"{eval_id}.{spec.id}.{j}")
                if r.outcome == Outcome.INFRA_ERROR:  # an earlier attempt's: the machine failed it, not the policy
                    store.redraw_rollout(r.id)
                work.append((spec, r.id))
        run_pending(work)
        summary = {**summarize_set(store, eval_id, specs, k), "name": name, "iteration": iteration,
                   "policy_version": policy_version, "valid": valid, "excluded": excluded,
                   "missing": sorted(set(valid) - {s.id for s in specs})}
        store.add_eval_set(eval_id, paths=[name], policy_version=policy_version, harness=harness, k=k,
                           summary=summary, run_id=run_id, iteration=iteration, name=name)
        out.append(summary)
    return out


def extra_set_curves(store: Store, run_id: str) -> dict[str, list[tuple[int, PassAt1]]]:
    """Each extra set's (iteration, pass@1 with interval and per level) over the run, by set name."""
    out: dict[str, list[tuple[int, PassAt1]]] = defaultdict(list)
    for row in store.run_eval_sets(run_id):
        s = row["summary"]
        out[row["name"]].append((row["iteration"], PassAt1(int(s["passed"]), int(s["n"]), s["low"], s["high"],
                                                           int(s["tasks"]), int(s["k"]), s.get("by_level", {}))))
    return dict(out)


def extra_sets_block(store: Store, run_id: str, iteration: int) -> list[dict[str, Any]]:
    """The report's block: each extra set evaluated at `iteration`, its figures and its trend so far."""
    out = []
    for name, curve in extra_set_curves(store, run_id).items():
        now = dict(curve).get(iteration)
        if now is None:
            continue
        row = store.run_eval_sets(run_id, name)
        first = row[0]["summary"]
        this = next(r["summary"] for r in row if r["iteration"] == iteration)
        out.append({"name": name, **now.as_dict(), "infra_errors": this.get("infra_errors", 0),
                    "policy_version": this.get("policy_version"), "excluded": first.get("excluded", []),
                    "missing": this.get("missing", []),
                    "trend": [{"iteration": it, "pass_at_1": p.pass_at_1, "low": p.low, "high": p.high, "n": p.n}
                              for it, p in curve if it <= iteration]})
    return out
