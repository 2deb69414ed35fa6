"""Curves: the run's held-out pass@1 over iterations as a character chart, each point's 95 % Wilson interval
drawn as a vertical bar; the transfer dev set's the same way when the run evaluated it, and each task set
of `evaluation.extra_sets` (the block is hidden when the run has none); pass@1 per level
and per family (first → last, a sparkline, the last interval); the trainer's metrics over optimizer steps.

The points are `appliance.charts`' (the HTML report draws the same ones as SVG), so the two never disagree.
A chart is drawn for the screen's width: one column slot per iteration, the latest iterations when there
are more than fit. Family names come from the store and are shown with `plain`; everything else on this
screen is numbers and our own labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from appliance.charts import Chart, Point, devset_chart, extra_set_charts, heldout_charts, training_charts
from appliance.tui.base import Context, PollingScreen, plain, run_title
from appliance.tui.overview import SPARKS, sparkline

ROWS = 11  # 0 %, 10 %, ..., 100 %: one row a tenth
DEV_ROWS = 6  # 0 %, 20 %, ..., 100 %: the dev set is the second look, kept short
AXIS = 6  # "100% ┤"
MAX_SLOT = 6  # columns per iteration at most: a few iterations still spread over the width
SPARK_WIDTH = 16  # per family and level
TRAIN_SPARK = 24  # per training metric; more steps than this are averaged into bins
NAME = 18  # a family or level name; longer ones are cut
FIELDS = ("heldout", "dev", "extra", "levels", "families", "training")


@dataclass(frozen=True, slots=True)
class CurvesData:
    title: str
    heldout: Content
    dev: Content
    extra: Content  # the user's task sets; empty: none evaluated (the block is hidden)
    levels: Content
    families: Content
    training: Content


class CurvesScreen(PollingScreen):
    TITLE_TEXT = "curves"

    def compose(self) -> ComposeResult:
        yield from self.compose_title()
        with VerticalScroll(id="curves"):
            for name in FIELDS:
                block = Static("", id=f"cv-{name}", classes="block")
                block.display = name != "extra"  # shown once the run has a task set's point
                yield block
        yield from self.compose_footer()

    def load(self, ctx: Context) -> CurvesData:
        if ctx.run is None:
            return CurvesData(run_title(None, "curves"), *(Content() for _ in FIELDS))
        # the block's padding and a scrollbar take 4 columns; read here so a resized terminal redraws
        width = max(40, (self.size.width or 80) - 4)
        store, run_id = ctx.store, ctx.run.id
        curve, families, levels = heldout_charts(store, run_id, None)
        dev = devset_chart(store, run_id)
        return CurvesData(
            run_title(ctx.run, "curves"),
            rate_chart(curve, width, ROWS),
            rate_chart(dev, width, DEV_ROWS) if dev.points else
            Content.assemble((dev.title, "bold"), "  ", ("not evaluated in this run", "dim")),
            Content("\n\n").join([rate_chart(c, width, DEV_ROWS) for c in extra_set_charts(store, run_id)]),
            breakdown("per level", levels), breakdown("per family", families),
            training(training_charts(store, run_id)))

    def show(self, data: CurvesData) -> None:
        self.set_title(data.title)
        for name in FIELDS:
            self.query_one(f"#cv-{name}", Static).update(getattr(data, name))  # each widget shows its field
        self.query_one("#cv-extra", Static).display = bool(data.extra.plain)


def rate_chart(chart: Chart, width: int, rows: int) -> Content:
    """A pass-rate chart in characters: rows are the 0-100 % axis, columns the iterations; `●` is the
    point, `│` its 95 % interval; below the axis the iteration numbers and the latest point in words."""
    head = Content.styled(chart.title, "bold")
    if not chart.points:
        return Content.assemble(head, "  ", ("no evaluation yet", "dim"))
    plot = width - AXIS - 2  # 2 columns to the right for the last iteration's number
    slot = max(1, min(MAX_SLOT, plot // len(chart.points)))
    shown = chart.points[-(plot // slot):]
    cols = slot * len(shown)
    grid = [[" "] * cols for _ in range(rows)]

    def row(v: float) -> int:  # row 0 is the top (100 %)
        return rows - 1 - round(min(1.0, max(0.0, v)) * (rows - 1))

    centres = [i * slot + slot // 2 for i in range(len(shown))]
    for p, col in zip(shown, centres):
        if p.low is not None and p.high is not None:
            for r in range(row(p.high), row(p.low) + 1):
                grid[r][col] = "│"
        grid[row(p.y)][col] = "●"
    lines = [head]
    for r, cells in enumerate(grid):
        value = (rows - 1 - r) / (rows - 1)
        label = f"{value:>4.0%} ┤" if r in (0, rows - 1) or abs(value - 0.5) < 1e-9 else "     │"
        line = Content(label + "".join(cells).rstrip())
        for col in centres:
            if cells[col] == "●":
                line = line.stylize("bold", AXIS + col, AXIS + col + 1)
        lines.append(line)
    lines.append(Content("     └" + "─" * cols))
    lines.append(Content(" " * AXIS + x_labels(shown, centres, cols)))
    return Content("\n").join([*lines, caption(chart.points, shown)])


def x_labels(points: list[Point], centres: list[int], cols: int) -> str:
    """The iteration numbers under their columns, as many as fit with a space between them."""
    out = [" "] * (cols + 2)
    free = 0
    for p, col in zip(points, centres):
        text = f"{p.x:g}"
        start = max(0, col - (len(text) - 1) // 2)
        if start >= free and start + len(text) <= len(out):
            out[start:start + len(text)] = text
            free = start + len(text) + 1
    return "".join(out).rstrip()


def caption(points: list[Point], shown: list[Point]) -> Content:
    """The latest point in words and, below it, the first (what the run started from)."""
    lines = [Content.assemble(("latest ", "dim"), points[-1].label)]
    if len(points) > 1:
        more = f"  ({len(shown)} of {len(points)} iterations drawn)" if len(shown) < len(points) else ""
        lines.append(Content.assemble(("first  ", "dim"), points[0].label, (more, "dim")))
    return Content("\n").join(lines)


def breakdown(heading: str, charts: list[Chart]) -> Content:
    """One line a family or level: `L2   0.00 → 0.34  ▁▃▅  [0.20-0.51]` (first and last pass@1, the
    curve on a 0-1 scale, the last point's 95 % interval)."""
    lines = [Content.styled(f"{heading:<{NAME}}{'first → last':<13}{'curve':<{SPARK_WIDTH + 2}}last 95 % interval",
                            "bold")]
    if not charts:
        lines.append(Content.styled("no evaluation yet", "dim"))
    for chart in charts:
        points = chart.points
        if not points:
            continue
        last = points[-1]
        interval = f"[{last.low:.2f}-{last.high:.2f}]" if last.low is not None and last.high is not None else ""
        spark = "".join(SPARKS[round(min(1.0, max(0.0, p.y)) * (len(SPARKS) - 1))] for p in points[-SPARK_WIDTH:])
        name = chart.title if len(chart.title) <= NAME - 1 else chart.title[:NAME - 2] + "…"
        lines.append(Content.assemble(plain(f"{name:<{NAME}}"), f"{points[0].y:.2f} → ", (f"{last.y:.2f}", "bold"),
                                      f"  {spark:<{SPARK_WIDTH}}  {interval}"))
    return Content("\n").join(lines)


def training(charts: list[Chart]) -> Content:
    """Each training metric the run recorded as a sparkline over its steps, with its last value."""
    lines = [Content.styled("training over optimizer steps", "bold")]
    missing = []
    for chart in charts:
        if not chart.points:
            missing.append(chart.title)
            continue
        values = binned([p.y for p in chart.points], TRAIN_SPARK)
        steps = f"steps {chart.points[0].x:g}-{chart.points[-1].x:g}"
        lines.append(Content.assemble(f"{chart.title:<31.31}{sparkline(values):<{TRAIN_SPARK}} ",
                                      (f"{chart.points[-1].y:.4g}", "bold"), f" · {steps}"))
    if missing:
        lines.append(Content.styled("not recorded in this run: " + ", ".join(missing), "dim"))
    return Content("\n").join(lines)


def binned(values: list[float], width: int) -> list[float]:
    """At most `width` values: the mean of each of `width` equal runs of steps (the last run is the newest)."""
    if len(values) <= width:
        return values
    edges = [round(i * len(values) / width) for i in range(width + 1)]
    return [sum(values[a:b]) / (b - a) for a, b in zip(edges, edges[1:]) if b > a]
