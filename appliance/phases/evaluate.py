"""EVALUATE: held-out pass@1 (and the transfer dev set's beside it) at the policy version now serving.

`appliance.evaluate` samples, budgets and counts; this phase validates held-out tasks not yet checked and
runs the rollouts through the same resumable path as practice.
"""

from __future__ import annotations

from functools import partial

from appliance.evaluate import evaluate_devset, evaluate_heldout
from appliance.phases.context import PhaseContext
from appliance.phases.practise import run_pending
from appliance.phases.validate import validate_tasks
from appliance.practice import new_rollout
from appliance.schemas import Task


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


def validating(ctx: PhaseContext, tasks: list[Task]) -> None:
    """Validate tasks (no safe point inside: a pause or a stop asked meanwhile waits for the end of it)."""
    with ctx.progress.during(f"validating {len(tasks)} tasks"):
        validate_tasks(ctx, tasks)


def warmstart_alone(ctx: PhaseContext, index: int) -> bool:
    """Whether this iteration learnt from the warm-start SFT alone: the first, under loop.warmstart_first,
    with nothing practised (the weights it trained exist by now, so `warmstart_first` no longer says so)."""
    return (index == 1 and ctx.settings.loop.warmstart_first and ctx.settings.training.demonstrations
            and not ctx.store.rollouts(ctx.run_id, iteration=index, purpose="train"))
