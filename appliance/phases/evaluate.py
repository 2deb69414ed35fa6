"""EVALUATE: held-out pass@1 (and the transfer dev set's beside it, then the user's `evaluation.extra_sets`)
at the policy version now serving.

`appliance.evaluate` samples, budgets and counts; this phase validates held-out tasks not yet checked, reads
(and validates by oracle, once a run) the user's sets, and runs the rollouts through the same resumable
path as practice.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from appliance.evaluate import evaluate_devset, evaluate_extra_sets, evaluate_heldout
from appliance.phases.context import PhaseContext
from appliance.phases.practise import run_pending
from appliance.phases.validate import validate_tasks
from appliance.practice import new_rollout
from appliance.schemas import Task
from appliance.tasks import TaskSpec


def evaluate(ctx: PhaseContext, index: int) -> None:
    if not ctx.settings.evaluation.after_warmstart and warmstart_alone(ctx, index):
        ctx.event("evaluate", f"iteration {index}: not evaluated: it is the warm-start alone "
                  "(evaluation.after_warmstart off); the next evaluation measures it with practice")
        return
    version, harness = ctx.engine.policy_version, ctx.settings.loop.harness
    run = partial(run_pending, ctx)
    # One rule for held-out pass@1, whatever the controller: `evaluate` samples, budgets and counts it, and
    # validates the tasks it chose (those only: the baseline's prefix needs no verdict on the rest).
    result = evaluate_heldout(ctx.store, ctx.settings, ctx.run_id, index, version, harness=harness,
                              run_pending=run, new_rollout=new_rollout, validate=partial(validating, ctx))
    ctx.event("evaluate", f"iteration {index}: held-out pass@1 {result.describe()} over {result.tasks} "
              f"tasks x {result.k} at policy version {version}")
    dev = evaluate_devset(ctx.store, ctx.settings, ctx.run_id, index, version, harness=harness, run_pending=run,
                          new_rollout=new_rollout, validate=partial(validating, ctx))
    if dev is not None:
        ctx.event("evaluate", f"iteration {index}: dev-set pass@1 {dev.describe()} over {dev.tasks} tasks x {dev.k}")
    for s in evaluate_extra_sets(ctx.store, ctx.settings, ctx.run_id, index, version, harness=harness,
                                 run_pending=run, new_rollout=new_rollout, load=partial(load_set, ctx, harness)):
        if "error" in s:
            ctx.event("evaluate", f"iteration {index}: task set {s['name']} not evaluated: {s['error']}")
            continue
        excluded = f"; {len(s['excluded'])} task(s) excluded at its validation" if s["excluded"] else ""
        if not s["tasks"]:
            ctx.event("evaluate", f"iteration {index}: task set {s['name']}: no task to evaluate{excluded}")
            continue
        ctx.event("evaluate", f"iteration {index}: task set {s['name']}: pass@1 {s['pass_at_1']:.1%} "
                  f"[{s['low']:.1%}, {s['high']:.1%}] ({s['passed']}/{s['n']}) over {s['tasks']} tasks x {s['k']}"
                  + (f", {s['infra_errors']} infra error(s) left out" if s["infra_errors"] else "") + excluded)


def validating(ctx: PhaseContext, tasks: list[Task]) -> None:
    """Validate tasks (no safe point inside: a pause or a stop asked meanwhile waits for the end of it)."""
    with ctx.progress.during(f"validating {len(tasks)} tasks"):
        validate_tasks(ctx, tasks)


def warmstart_alone(ctx: PhaseContext, index: int) -> bool:
    """Whether this iteration learnt from the warm-start SFT alone: the first, under loop.warmstart_first,
    with nothing practised (the weights it trained exist by now, so `warmstart_first` no longer says so)."""
    return (index == 1 and ctx.settings.loop.warmstart_first and ctx.settings.training.demonstrations
            and not ctx.store.rollouts(ctx.run_id, iteration=index, purpose="train"))


def load_set(ctx: PhaseContext, harness: str, path: Path, oracle: bool) -> tuple[list[TaskSpec], list[dict[str, str]]]:
    """One of `evaluation.extra_sets`: its tasks (validated by oracle when `oracle`: the run's first evaluation
    of it) and each exclusion's reason. A task with its own environment needs the built-in harness: under
    another it is excluded, said so, rather than run where it cannot be honoured."""
    from appliance.tasks.foreign import load_sets, validate_sets
    from appliance.tasks.harbor import task_image

    quiet = ctx.log  # environment builds: the log, not events
    if oracle:
        with ctx.progress.during(f"validating the task set {path} by oracle"):
            found, _ = validate_sets(ctx.settings, [path], log=quiet)
    else:
        found = load_sets(ctx.settings, [path], log=quiet)
    excluded = [{"path": e.path, "reason": e.reason} for e in found.excluded]
    specs = []
    for spec in found.specs:
        if harness != "builtin" and task_image(spec):
            excluded.append({"path": found.paths.get(spec.id, spec.id), "reason": f"brings its own environment, "
                             f"which harness {harness!r} cannot run in yet (the built-in harness can)"})
        else:
            specs.append(spec)
    return specs, excluded
