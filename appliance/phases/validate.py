"""VALIDATE: agent-free validation of the iteration's proposed tasks, then the demonstrations made from them.

An infra failure leaves a task `proposed`, so a later pass retries it; a verdict makes it valid or rejected.
"""

from __future__ import annotations

from appliance.demonstrations import prepare_demonstrations
from appliance.phases.context import PhaseContext
from appliance.schemas import Task, TaskStatus
from appliance.tasks import TaskSpec
from appliance.tasks.validate import validate_many


def validate_tasks(ctx: PhaseContext, tasks: list[Task]) -> None:
    verdicts = validate_many(ctx.settings, [TaskSpec.of(t) for t in tasks], parallel=ctx.practice.pool.max_concurrent,
                             start=ctx.practice.pool.start)
    for task, v in zip(tasks, verdicts):
        for stage in v.stages:
            ctx.store.add_validation(task.id, stage.name, stage.ok, stage.detail or None)
        if not v.infra:
            ctx.store.set_task_status(task.id, TaskStatus.VALID if v.ok else TaskStatus.REJECTED, reason=v.reason)
    ctx.check_stopping("validation")


def validate(ctx: PhaseContext, index: int) -> None:
    pending = ctx.iteration_tasks(index, TaskStatus.PROPOSED)
    validate_tasks(ctx, pending)
    checked = {t.id for t in pending}
    valid = ctx.iteration_tasks(index, TaskStatus.VALID)
    new_valid = sum(t.id in checked for t in valid)
    # replays (and tasks a crash left validated) were valid before this pass: counted apart
    ctx.event("validate", f"iteration {index}: {new_valid} of {len(pending)} new tasks valid, "
                          f"{len(valid) - new_valid} valid before")
    if ctx.settings.training.demonstrations:
        made = prepare_demonstrations(ctx.settings, ctx.store, ctx.run_id, index, ctx.tokenizer(), ctx.families,
                                      start=ctx.practice.pool.start, stopping=ctx.practice.stopping)
        ctx.check_stopping("demonstrations")
        ctx.event("demonstrations", f"iteration {index}: {made.added} new demonstrations", **made.as_dict())
        if made.unrendered:  # loud: a template that renders none of them leaves the warm-start empty
            task_id, why = next(iter(made.unrendered.items()))
            ctx.event("error", f"iteration {index}: the chat template could not render {len(made.unrendered)} "
                               f"demonstrations (first, {task_id}: {why})", unrendered=len(made.unrendered))
