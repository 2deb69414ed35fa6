"""DIAGNOSE: the iteration's capability report, and the levels (and with `climb`, the plan) the next
synthesis uses. Iteration 0 (the baseline) plans too."""

from __future__ import annotations

from collections.abc import Callable

from appliance.curriculum import control
from appliance.diagnosis import build_report, render_markdown
from appliance.errors import Interrupted
from appliance.evaluate import extra_sets_block, learning_curve
from appliance.learning_signal import learning_signal
from appliance.phases.context import PhaseContext
from appliance.tasks.difficulty import next_levels


def _analyst(ctx: PhaseContext) -> Callable[[str], str] | None:
    """The policy as the report's analysis asks it. A request the engine did not answer leaves the report
    without an analysis (it says why); one the shutdown broke is an interruption, so that DIAGNOSE is redone
    at the next start rather than saved, done, without the analysis it would have had."""
    generate = ctx.generate_text
    if generate is None or not ctx.settings.loop.analysis:
        return None

    def write(prompt: str) -> str:
        try:
            return generate(prompt)
        except Exception as e:
            if ctx.stop_now.is_set() or ctx.practice.stopping.is_set():
                raise Interrupted(f"the report's analysis ran into the shutdown ({type(e).__name__}: {e})") from e
            raise
    return write


def diagnose(ctx: PhaseContext, index: int) -> None:
    levels = ctx.levels_after(index)
    report, _ = build_report(ctx.store, ctx.run_id, index, _analyst(ctx))
    report.extra_sets = extra_sets_block(ctx.store, ctx.run_id, index)  # the user's task sets (issue 53)
    if index > 0:
        levels = next_levels(report, levels)
    report.levels = levels  # what the next synthesis uses
    if index > 0:  # the baseline practises and trains nothing
        report.learning_signal = learning_signal(ctx.store, ctx.run_id, index, ctx.settings.loop.group_size).as_dict()
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
