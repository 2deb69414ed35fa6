"""Reports: the capability report of any iteration, rendered from its Markdown, or its diff to the
report of the iteration before.

Rendered with Rich's Markdown in the worker thread, once per report and width, into plain styled text
for one Static: Textual's Markdown widget builds a widget per block and took seconds to open a long
report, and even Rich's renderer costs ~0.2 s for a long one, too much to pay on the UI thread or per tick.
A report quotes the policy's own analysis and task text: the Markdown is made inert before Rich renders
it (its ANSI output is read back as styles), and links are shown as text, not hyperlinks.
"""

from __future__ import annotations

import difflib
import io
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from appliance.tui.base import Context, PollingScreen, inert, plain, run_title


@dataclass(frozen=True, slots=True)
class ReportsData:
    title: str
    iterations: tuple[int, ...]
    shown: int | None
    markdown: str
    rendered: Text
    width: int  # the width `rendered` was laid out for
    previous: str | None  # the report before `shown`, for the diff


class ReportsScreen(PollingScreen):
    TITLE_TEXT = "reports"
    BINDINGS = [Binding("d", "toggle_diff", "Diff to previous")]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.selected: int | None = None  # None: the latest report
        self.diff = False
        self._rendered: dict[tuple[str, int], Text] = {}

    def compose(self) -> ComposeResult:
        yield from self.compose_title()
        with Horizontal(id="reports"):
            yield OptionList(id="report-list")
            with VerticalScroll(id="report-body"):
                yield Static("", id="report")
                yield Static("", id="report-diff")
        yield from self.compose_footer()

    def load(self, ctx: Context) -> ReportsData:
        if ctx.run is None:
            return ReportsData(run_title(None, "reports"), (), None, "", Text(), 0, None)
        store, run_id = ctx.store, ctx.run.id
        iterations = tuple(store.report_iterations(run_id))
        shown = self.selected if self.selected in iterations else (iterations[-1] if iterations else None)
        if shown is None:
            note = "No capability report yet: the first one is written at the end of iteration 0."
            return ReportsData(run_title(ctx.run, "reports"), (), None, note, Text(note), 0, None)
        _, markdown = store.report(run_id, shown) or ({}, "")
        earlier = [i for i in iterations if i < shown]
        previous = (store.report(run_id, earlier[-1]) or ({}, None))[1] if earlier else None
        width = self.body_width()
        return ReportsData(run_title(ctx.run, "reports"), iterations, shown, markdown,
                           self.render_markdown(markdown, width), width, previous)

    def body_width(self) -> int:
        return max(20, self.query_one("#report-body").content_size.width - 1)

    def render_markdown(self, markdown: str, width: int) -> Text:
        key = (markdown, width)
        if key not in self._rendered:
            console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system="256")
            with console.capture() as out:
                console.print(Markdown(inert(markdown), hyperlinks=False))
            self._rendered = {key: Text.from_ansi(out.get())}  # keep one: the report on display
        return self._rendered[key]

    def show(self, data: ReportsData) -> None:
        self.set_title(data.title + ("" if data.shown is None else f" · iteration {data.shown}"))
        options = self.query_one("#report-list", OptionList)
        if tuple(o.id for o in options.options) != tuple(str(i) for i in data.iterations):
            options.clear_options()
            options.add_options([Option(f"iteration {i}", id=str(i)) for i in data.iterations])
        if data.shown is not None and data.iterations:
            options.highlighted = data.iterations.index(data.shown)
        report = self.query_one("#report", Static)
        report.update(data.rendered)
        if data.width and data.width != self.body_width():  # laid out before the screen had its size
            self.reload(force=True)
        report.display = not self.diff
        diff = self.query_one("#report-diff", Static)
        diff.display = self.diff
        if self.diff:
            diff.update(diff_text(data.previous, data.markdown))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        chosen = int(str(event.option.id))
        if chosen != self.selected:
            self.selected = chosen
            self.reload(force=True)

    def on_resize(self) -> None:
        self.reload(force=True)

    def action_toggle_diff(self) -> None:
        self.diff = not self.diff
        self.reload(force=True)


def diff_text(previous: str | None, current: str) -> Content:
    if previous is None:
        return Content.styled("no earlier report to compare with", "dim")
    lines = difflib.unified_diff(previous.splitlines(), current.splitlines(), "previous", "this", lineterm="", n=2)
    out = []
    for line in lines:
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else \
            "cyan" if line.startswith("@") else ""
        out.append(plain(line, style))
    return Content("\n").join(out) if out else Content.styled("identical to the previous report", "dim")
