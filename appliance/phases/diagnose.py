"""DIAGNOSE: the iteration's capability report, and the levels (and with `climb`, the plan) the next
synthesis uses. Iteration 0 (the baseline) plans too."""

from __future__ import annotations

from appliance.curriculum import control
from appliance.diagnosis import build_report, render_markdown
from appliance.evaluate import learning_curve
from appliance.phases.context import PhaseContext
from appliance.tasks.difficulty import next_levels


def diagnose(ctx: PhaseContext, index: int) -> None:
    levels = ctx.levels_after(index)
    report, _ = build_report(ctx.store, ctx.run_id, index, ctx.generate_text if ctx.settings.loop.analysis else None)
    if index > 0:
        levels = next_levels(report, levels)
    report.levels = levels  # what the next synthesis uses
    if ctx.settings.loop.controller != "climb":
        ctx.store.save_report(ctx.run_id, index, report, render_markdown(report))
        p = report.heldout_pass_at_1
        ctx.event("diagnose", f"iteration {index}: report saved (held-out pass@1 {'n/a' if p is None else f'{p:.1%}'})")
        return
    decisions = control(ctx.store, ctx.run_id, index, ctx.families, report, ctx.settings)
    report.levels = {f: d.level for f, d in decisions.items()}
    report.mastered = {f: d.mastered for f, d in decisions.items()}
    report.decisions = {f: d.as_dict() for f, d in decisions.items()}
    curve = learning_curve(ctx.store, ctx.run_id)
    report.evaluation = curve[-1][1].as_dict() if curve and curve[-1][0] == index else None
    report.curve = [{"iteration": it, **p.as_dict()} for it, p in curve]
    ctx.store.save_report(ctx.run_id, index, report, render_markdown(report))
    ev = report.evaluation
    said = f"{ev['pass_at_1']:.1%} [{ev['low']:.1%}, {ev['high']:.1%}]" if ev else "n/a"
    ctx.event("diagnose", f"iteration {index}: report saved (held-out pass@1 {said})")
