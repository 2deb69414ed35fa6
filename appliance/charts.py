"""The curves' data, read once for every place that draws them: the HTML report (`report_html`, as SVG) and
the TUI's curves screen (`tui.curves`, as characters).

A `Chart` is a list of `Point`s: held-out pass@1 per iteration with its 95 % Wilson interval (over all
families, per family, per level), the transfer dev set's and each of `evaluation.extra_sets` the same way,
and the trainer's metrics per optimizer step (loss, reward, groups with signal, the engine/trainer logprob
gap: what `store.add_metrics` records). Pass rates come from `evaluate`, the one place that says what pass@1
and its interval are; this module only groups them. Drawing is the reader's business: nothing here formats
for a screen or a page.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from appliance.evaluate import devset_curve, extra_set_curves, learning_curve, wilson
from appliance.store import Store

# (metric name in `metrics`, label): the training signals a reader asks about first
TRAINING_METRICS = [
    ("loss", "GRPO loss"), ("sft_loss", "SFT loss"), ("reward_mean", "reward (mean)"),
    ("groups_with_signal", "groups with signal"), ("logprob_gap_mean", "logprob gap, engine vs trainer"),
    ("is_ratio_mean", "engine IS ratio (mean)"),
]


@dataclass
class Point:
    x: float
    y: float
    low: float | None = None  # the 95 % interval, where the point has one
    high: float | None = None
    label: str = ""  # what the point says in words (a tooltip, a caption)


@dataclass
class Chart:
    title: str
    x_label: str
    points: list[Point] = field(default_factory=list)
    percent: bool = False  # y is a pass rate: the axis runs 0-100 %


def _rate_point(x: int, passed: int, n: int, what: str) -> Point:
    low, high = wilson(passed, n)
    rate = passed / n if n else 0.0
    return Point(x, rate, low, high, f"{what} {x}: {rate:.0%} [{low:.0%}, {high:.0%}] ({passed}/{n})")


def heldout_charts(store: Store, run_id: str, iteration: int | None) -> tuple[Chart, list[Chart], list[Chart]]:
    """The learning curve up to `iteration` (None: all of it), and the same per family and per level."""
    last = iteration if iteration is not None else math.inf
    curve = Chart("held-out pass@1 (all families)", "iteration", percent=True)
    for it, p in learning_curve(store, run_id):
        if it <= last:
            curve.points.append(Point(it, p.pass_at_1, p.low, p.high,
                                      f"iteration {it}: {p.describe()}"))
    cells: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for e in store.evals(run_id):
        if e["iteration"] > last:
            continue
        for key in (("family", e["family"]), ("level", f"L{e['difficulty']}")):
            cell = cells[key][e["iteration"]]
            cell[0] += int(e["passed"])
            cell[1] += int(e["n"])

    def charts(kind: str) -> list[Chart]:
        out = []
        for (k, name), by_iter in sorted(cells.items(), key=lambda kv: _natural(kv[0][1])):
            if k == kind:
                out.append(Chart(name, "iteration", [_rate_point(it, p, n, "iteration")
                                                     for it, (p, n) in sorted(by_iter.items())], percent=True))
        return out

    return curve, charts("family"), charts("level")


def devset_chart(store: Store, run_id: str, iteration: int | None = None) -> Chart:
    """The transfer dev set's pass@1 per iteration with its interval; no points where it was never evaluated."""
    last = iteration if iteration is not None else math.inf
    chart = Chart("dev-set pass@1 (transfer)", "iteration", percent=True)
    for it, p in devset_curve(store, run_id):
        if it <= last and p.n:
            chart.points.append(Point(it, p.pass_at_1, p.low, p.high, f"iteration {it}: {p.describe()}"))
    return chart


def extra_set_charts(store: Store, run_id: str, iteration: int | None = None) -> list[Chart]:
    """Each of the run's `evaluation.extra_sets` (the user's task sets): pass@1 per iteration with its interval."""
    last = iteration if iteration is not None else math.inf
    out = []
    for name, curve in sorted(extra_set_curves(store, run_id).items()):
        chart = Chart(f"task set {name}", "iteration", percent=True)
        chart.points = [Point(it, p.pass_at_1, p.low, p.high, f"iteration {it}: {p.describe()}")
                        for it, p in curve if it <= last and p.n]
        out.append(chart)
    return out


def training_charts(store: Store, run_id: str) -> list[Chart]:
    out = []
    for name, label in TRAINING_METRICS:
        points = [Point(step, value, label=f"step {step}: {value:.4g}")
                  for step, value in store.metric_series(run_id, name) if math.isfinite(value)]
        out.append(Chart(label, f"optimizer step · {name}", points))
    return out


def _natural(name: str) -> tuple[Any, ...]:
    """L2 before L10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))
