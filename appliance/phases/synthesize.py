"""SYNTHESIZE: the iteration's new training tasks, as `proposed` rows (VALIDATE decides which are kept).

With the climbing controller (`loop.controller = "climb"`, the default) `appliance.curriculum` makes the
round; the simple controller draws each family's budget at the level the last report set.
"""

from __future__ import annotations

from appliance.curriculum import synthesize_round
from appliance.phases.context import PhaseContext
from appliance.schemas import Split
from appliance.tasks.difficulty import split_budget
from appliance.tasks.families import synthesize as synthesize_family


def synthesize(ctx: PhaseContext, index: int) -> None:
    lp = ctx.settings.loop
    if lp.controller == "climb":  # appliance.curriculum: frontier, stretch and replay tasks
        made = synthesize_round(ctx.store, ctx.settings, ctx.run_id, index, ctx.families,
                                ctx.generate_text if lp.propose else None)
        ctx.event("synthesize", f"iteration {index}: " + ", ".join(f"{v} {k}" for k, v in made["made"].items())
                  + " tasks", levels=made["levels"], plan=made["plan"])
        return
    report = ctx.previous_report(index)
    levels = ctx.levels_after(index)
    exclude = {t.spec["id"] for t in ctx.store.tasks(ctx.run_id)}  # held-out and earlier tasks
    added = 0
    # `levels` already holds the controller's move (made when the previous report was written);
    # the budget leans toward the families whose pass rate at that level is nearest 50 %.
    budget = split_budget(report, lp.tasks_per_iteration, ctx.families, levels=levels)
    for family in ctx.families:
        for spec in synthesize_family(family, levels[family], budget.get(family, 0), seed=f"{ctx.run_id}:{index}",
                                      exclude=exclude):
            spec.meta["iteration"] = index
            added += ctx.store.add_task(spec.task_row(ctx.run_id, Split.TRAIN, iteration=index))
    ctx.event("synthesize", f"iteration {index}: {added} new tasks", levels=levels)
