"""The capability report as one self-contained HTML page, for copying off the server (`appliance report --html`).

What it shows: the held-out learning curve with its 95 % Wilson intervals, the same per family and per level
over iterations, the training metrics over optimizer steps (loss, reward, groups with signal, the
engine/trainer logprob gap) read from the store's `metrics` rows, and the report itself (its Markdown
rendered as HTML tables, lists and headings, so every section the report gains appears here too; the policy's
own analysis is its text, in a block of its own, never Markdown: it cannot add a section).

The points come from `appliance.charts` (the TUI's curves screen reads the same); the transfer dev set's
curve is shown when the run evaluated it. The page needs nothing but a browser: the charts are inline SVG
drawn here, the style is one <style>
block, there is no script and no link to fetch. Every stored string (task text, agent output, family
names) is escaped with `html.escape`: task text and agent output are hostile. It is written to a
partial file beside the destination and renamed, so a reader never sees half a page.
"""

from __future__ import annotations

import html
import math
import os
import re
import time
from pathlib import Path

from appliance.charts import Chart, devset_chart, extra_set_charts, heldout_charts, training_charts
from appliance.errors import ApplianceError
from appliance.learning_signal import render_table
from appliance.schemas import CapabilityReport
from appliance.store import Store

MAX_MARKERS = 80  # a series with more points is drawn as a line alone: thousands of circles help nobody


def write_html(store: Store, run_id: str, report: CapabilityReport, markdown: str, path: Path) -> Path:
    """Write the page for one stored report to `path` (atomically); returns the resolved path."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ApplianceError(f"{path} is a directory", f"name a file, e.g. {path / 'report.html'}")
    if not path.parent.is_dir():
        raise ApplianceError(f"the folder {path.parent} does not exist",
                             f"create it first (mkdir -p {path.parent}) or write the page elsewhere")
    page = render_page(store, run_id, report, markdown)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(page, encoding="utf-8")
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise ApplianceError(f"cannot write {path}: {e}", "check the folder's permissions and free disk") from e
    return path.resolve()


ANALYSIS_HEADING = "## The policy's own analysis"


def split_analysis(report: CapabilityReport, markdown: str) -> tuple[str, str]:
    """The report's own Markdown, and the policy's analysis that `diagnosis.render_markdown` puts last under
    ANALYSIS_HEADING (heading included in the first part). The analysis is the policy's text: rendered as
    the report's Markdown, its headings and tables became sections of the page."""
    text = report.analysis or ""
    if text and markdown.endswith(text + "\n"):
        return markdown[:len(markdown) - len(text) - 1], text
    # (a report stored in another shape: everything after the first such heading, which the report wrote)
    at = markdown.find(f"\n{ANALYSIS_HEADING}\n")
    if at < 0:
        return markdown, ""
    cut = at + len(ANALYSIS_HEADING) + 2
    return markdown[:cut], markdown[cut:]


def analysis_html(text: str) -> str:
    """The policy's analysis as plain paragraphs in its own block: every line escaped as text (a `#` heading,
    a `|` table or a list of its own stays a line of text), **bold** and `code` alone rendered."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    inner = "".join("<p>" + "<br>".join(_inline(line) for line in p.splitlines()) + "</p>" for p in paragraphs)
    return f'<div class="analysis">{inner}</div>'


def render_page(store: Store, run_id: str, report: CapabilityReport, markdown: str) -> str:
    iteration = report.iteration  # None (a report without it): the whole curve
    markdown, analysis = split_analysis(report, markdown)
    head, _, body = markdown.partition("\n## ")
    body = "## " + body if body else ""
    curve, families, levels = heldout_charts(store, run_id, iteration)
    training = training_charts(store, run_id)
    dev = devset_chart(store, run_id, iteration)
    extra = [c for c in extra_set_charts(store, run_id, iteration) if c.points]  # evaluation.extra_sets
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(f'appliance report: run {run_id}, iteration {iteration}')}</title>",
        f"<style>{CSS}</style></head><body>",
        markdown_html(head),
        f'<p class="meta">run {esc(run_id)} · written {esc(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))}</p>',
        '<h2 id="curve">Held-out learning curve</h2>',
        "<p>pass@1 per iteration; the bars are 95 % Wilson intervals over the rollouts of the iteration.</p>",
        svg_chart(curve, width=640, height=280),
        '<h3>Per family</h3><div class="grid">', *(svg_chart(c) for c in families), "</div>",
        '<h3>Per level</h3><div class="grid">', *(svg_chart(c) for c in levels), "</div>",
        ('<h3>Transfer dev set</h3>' + svg_chart(dev)) if dev.points else "",
        ('<h3 id="extra-sets">Your task sets (evaluation.extra_sets, never trained on)</h3><div class="grid">'
         + "".join(svg_chart(c) for c in extra) + "</div>") if extra else "",
        '<h2 id="training">Training over optimizer steps</h2>',
        '<div class="grid">', *(svg_chart(c) for c in training), "</div>",
        signal_html(store, run_id, iteration),
        '<hr><div class="report">', markdown_html(body), analysis_html(analysis) if analysis else "", "</div>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def signal_html(store: Store, run_id: str, iteration: int | None) -> str:
    """The learning signal of every iteration up to this one (issue 54), from the stored reports' blocks;
    nothing when no report carries one (reports written before it)."""
    last = iteration if iteration is not None else math.inf
    blocks = [found[0].learning_signal for it in store.report_iterations(run_id)
              if it <= last and (found := store.report(run_id, it)) is not None and found[0].learning_signal]
    if not blocks:
        return ""
    return ('<h2 id="signal">Learning signal per iteration</h2><p>practice groups whose rewards differ (the only ones '
            "GRPO learns from), tokens the RL step trained of those sampled in practice, SFT's tokens, the policy's "
            "entropy per token.</p>" + markdown_html("\n".join(render_table([b for b in blocks if b]))))


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


# --- the charts ----------------------------------------------------------------------------------

def svg_chart(chart: Chart, *, width: int = 300, height: int = 190) -> str:
    """One chart as inline SVG: points joined by a line, each with its interval bar where it has one."""
    left, right, top, bottom = 46, 12, 30, 34
    title = f'<text class="title" x="8" y="14">{esc(chart.title)}</text>'
    if not chart.points:
        return (f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{esc(chart.title)}">'
                f'{title}<text class="empty" x="{left}" y="{height / 2:.0f}">not recorded in this run</text></svg>')
    xs = [p.x for p in chart.points]
    if chart.percent:
        y0, y1 = 0.0, 1.0
    else:
        values = [p.y for p in chart.points]
        y0, y1 = min(values), max(values)
        pad = (y1 - y0) * 0.08 or abs(y1) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    x0, x1 = min(xs), max(xs)
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:  # 8 px inside the axes, so the first and last interval bars stay visible
        return left + 8 + (plot_w / 2 - 8 if x1 == x0 else (x - x0) / (x1 - x0) * (plot_w - 16))

    def sy(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0) * plot_h

    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{esc(chart.title)}">', title]
    for tick in _ticks(y0, y1, percent=chart.percent):
        y = sy(tick)
        text = f"{tick:.0%}" if chart.percent else f"{tick:.3g}"
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{text}</text>')
    for x in _x_ticks(xs):
        out.append(f'<text class="tick" x="{sx(x):.1f}" y="{height - bottom + 14}" text-anchor="middle">{x:g}</text>')
    out.append(f'<text class="axis" x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">'
               f'{esc(chart.x_label)}</text>')
    if len(chart.points) > 1:
        line = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in chart.points)
        out.append(f'<polyline class="series" points="{line}"/>')
    markers = len(chart.points) <= MAX_MARKERS
    for p in chart.points:
        x, y = sx(p.x), sy(p.y)
        if p.low is not None and p.high is not None:
            lo, hi = sy(p.low), sy(p.high)
            out.append(f'<g class="interval" data-low="{p.low:.4f}" data-high="{p.high:.4f}">'
                       f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{lo:.1f}" y2="{hi:.1f}"/>'
                       f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{lo:.1f}" y2="{lo:.1f}"/>'
                       f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{hi:.1f}" y2="{hi:.1f}"/></g>')
        if markers:
            out.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3" data-x="{p.x:g}" '
                       f'data-y="{p.y:.4f}"><title>{esc(p.label)}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def _ticks(y0: float, y1: float, *, percent: bool) -> list[float]:
    if percent:
        return [0.0, 0.25, 0.5, 0.75, 1.0]
    return [y0 + (y1 - y0) * i / 4 for i in range(5)]


def _x_ticks(xs: list[float]) -> list[float]:
    unique = sorted(set(xs))
    if len(unique) <= 10:
        return unique
    every = math.ceil(len(unique) / 8)
    return unique[::every] + ([unique[-1]] if (len(unique) - 1) % every else [])


# --- the report's Markdown as HTML ---------------------------------------------------------------

def markdown_html(markdown: str) -> str:
    """The subset of Markdown `diagnosis.render_markdown` writes: headings, pipe tables, bullet lists
    (one level of nesting), paragraphs, **bold** and `code`. Text is escaped before any tag is added."""
    out: list[str] = []
    table: list[list[str]] = []
    items: list[str] = []

    def flush() -> None:
        if table:
            head, *rows = table
            out.append("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
                       + "</tbody></table>")
            table.clear()
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
            items.clear()

    for raw in markdown.splitlines():
        line = raw.rstrip()
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(re.fullmatch(r"-+", c) for c in cells):  # the |---| separator row
                table.append([_inline(c) for c in cells])
            continue
        if line.startswith("  - ") and items:
            items[-1] = items[-1].removesuffix("</li>") + f'<div class="sub">{_inline(line[4:])}</div></li>'
            continue
        if line.startswith("- "):
            if table:
                flush()
            items.append(f"<li>{_inline(line[2:])}</li>")
            continue
        flush()
        if not line:
            continue
        heading = re.match(r"(#{1,3}) (.*)", line)
        if heading:
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        else:
            out.append(f"<p>{_inline(line)}</p>")
    flush()
    return "\n".join(out)


def _inline(text: str) -> str:
    text = esc(text)  # first: what follows only adds tags around already escaped text
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", text)


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; } h3 { margin-bottom: .3em; }
.meta { color: #666; }
.grid { display: flex; flex-wrap: wrap; gap: 8px; }
svg.chart { background: #fafafa; border: 1px solid #e4e4e4; }
svg .title { font-size: 12px; font-weight: 600; fill: #333; }
svg .tick, svg .axis { font-size: 10px; fill: #666; }
svg .empty { font-size: 11px; fill: #999; }
svg line.grid { stroke: #e6e6e6; }
svg .series { fill: none; stroke: #2b6cb0; stroke-width: 1.5; }
svg .interval line { stroke: #90b4e0; stroke-width: 1.5; }
svg .point { fill: #2b6cb0; }
table { border-collapse: collapse; margin: .5em 0; } th, td { border: 1px solid #ddd; padding: 2px 8px; }
th { background: #f0f0f0; } td { text-align: right; } td:first-child { text-align: left; }
code { background: #f3f3f3; padding: 0 3px; white-space: pre-wrap; word-break: break-all; }
.sub { color: #555; margin-left: 1em; }
.analysis { border-left: 3px solid #ccc; padding-left: 1em; color: #333; }
"""
