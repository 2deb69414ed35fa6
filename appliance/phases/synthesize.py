"""SYNTHESIZE: the iteration's new training tasks, as `proposed` rows (VALIDATE decides which are kept).

With the climbing controller (`loop.controller = "climb"`, the default) `appliance.curriculum` makes the
round; the simple controller draws each family's budget at the level the last report set.
"""

from __future__ import annotations

import httpx

from appliance.curriculum import synthesize_round
from appliance.errors import Interrupted
from appliance.phases.context import GenerateText, PhaseContext
from appliance.schemas import Split
from appliance.tasks.difficulty import split_budget
from appliance.tasks.families import synthesize as synthesize_family


def synthesize(ctx: PhaseContext, index: int) -> None:
    lp = ctx.settings.loop
    if lp.controller == "climb":  # appliance.curriculum: frontier, stretch and replay tasks
        unanswered: list[str] = []
        policy = _proposals(ctx, ctx.generate_text, unanswered) if lp.propose and ctx.generate_text else None
        made = synthesize_round(ctx.store, ctx.settings, ctx.run_id, index, ctx.families, policy)
        ctx.event("synthesize", f"iteration {index}: " + ", ".join(f"{v} {k}" for k, v in made["made"].items())
                  + " tasks", levels=made["levels"], plan=made["plan"])
        if unanswered:
            ctx.event("synthesize", f"iteration {index}: {len(unanswered)} of {lp.propose} proposal requests got no "
                      f"answer ({unanswered[0]}); counted as proposals that did not parse", unanswered=unanswered)
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


def _proposals(ctx: PhaseContext, generate: GenerateText, unanswered: list[str]) -> GenerateText:
    """The policy as self-proposal asks it. Proposals are an extra on top of the round's procedural tasks: a
    request the engine did not answer (timed out, refused, a 5xx) yields no proposal, noted in `unanswered`,
    instead of failing SYNTHESIZE, whose retry asked the whole round again (the bundled model's 8 x 512 tokens
    outlasted the 300 s request timeout at every attempt). A request the shutdown broke is an interruption."""
    def ask(prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        try:
            return generate(prompt, max_tokens=max_tokens, temperature=temperature)
        except httpx.HTTPError as e:
            if ctx.stop_now.is_set() or ctx.practice.stopping.is_set():
                raise Interrupted(f"self-proposal ran into the shutdown ({type(e).__name__}: {e})") from e
            unanswered.append(f"{type(e).__name__}: {e}")
            return ""
    return ask
