"""What every screen shares: a title line, a problem line, and reads off the UI thread on a timer.

A screen implements `load(ctx)` (runs in a thread: store reads only, returns plain data) and
`show(data)` (runs on the UI thread: updates widgets). The store being busy or missing, or no run yet,
is shown on the problem line and retried at the next tick, never raised.

Text from the store or a task (instructions, file names, reasons, observations, errors) is shown with
`plain`: a `Content` object, never parsed as markup (Rich's `escape` lets `[1 a=b:c]` through and Textual's
parser then raised MarkupError and closed the window), with control characters shown as escapes. Every
widget gets `Content` (Textual's own text: its colour names mean what they mean in markup), built with
`Content.assemble` where our own styling sits beside such text; `fill` makes every table cell plain.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from appliance.errors import ApplianceError
from appliance.schemas import Run
from appliance.store import Store

if TYPE_CHECKING:
    from appliance.tui.app import ApplianceApp


# C0 controls but newline and tab, DEL, C1 controls and the bidirectional overrides, shown as their escapes
_CONTROLS = [c for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"]
_INERT = ({c: f"\\x{c:02x}" for c in _CONTROLS}
          | {c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def inert(text: object) -> str:
    return str(text).translate(_INERT)


def plain(text: object, style: str = "") -> Content:
    """Text that is not ours, for a widget: no markup is read in it, control characters are made visible."""
    return Content.styled(inert(text), style)


@dataclass(slots=True)
class Context:
    """What `load` gets: the store and the run the TUI watches (None until one exists)."""

    store: Store
    run: Run | None
    now: float


class PollingScreen(Screen):
    """A screen that re-reads its data a few times a second while it is the one on display."""

    TITLE_TEXT = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._loading = False
        self._shown: Any = object()  # the last data shown: unchanged data does not touch the widgets

    @property
    def appliance(self) -> ApplianceApp:
        return self.app  # type: ignore[return-value]

    def compose_title(self) -> ComposeResult:
        yield Static(self.TITLE_TEXT, id="title", classes="title")
        yield Static("", id="problem", classes="problem")

    def compose_footer(self) -> ComposeResult:
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(self.appliance.refresh_s, self.reload)
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def reload(self, *, force: bool = False) -> None:
        if force:
            self._shown = object()
        if self._loading or not self.is_current:
            return
        self._loading = True
        self.run_worker(self._refresh(), group="refresh")

    async def _refresh(self) -> None:
        try:
            data = await asyncio.to_thread(self._load)
        except ApplianceError as e:  # a run named with --run that does not exist, a store that cannot open
            self._say_problem(plain(f"{e.message}; {e.hint}" if e.hint else e.message))
            return
        except (sqlite3.Error, OSError) as e:
            # sqlite "database is locked", a store mid-migration or a vanished file: say so, try again
            self._say_problem(plain(f"store unavailable ({_first_line(e)}); retrying"))
            return
        except Exception as e:  # noqa: BLE001 - e.g. a value a newer loop wrote: a watcher over SSH stays up
            self._say_problem(plain(f"cannot show this screen: {type(e).__name__}: {_first_line(e)}"))
            return
        finally:
            self._loading = False
        if not self._say_problem(""):
            return
        if data != self._shown:
            self._shown = data
            self.show(data)

    def _say_problem(self, text: Any) -> bool:
        """Show text on the problem line; False when the screen's widgets are gone (the app is closing while
        a read was in flight), and there is nothing left to show anything on."""
        lines = self.query("#problem")
        if not lines:
            return False
        lines.first(Static).update(text)
        return True

    def _load(self) -> Any:
        app = self.appliance
        store = app.open_store()
        run = app.current_run(store)
        return self.load(Context(store, run, app.clock()))

    def load(self, ctx: Context) -> Any:
        raise NotImplementedError

    def show(self, data: Any) -> None:
        raise NotImplementedError

    def set_title(self, text: str) -> None:
        self.query_one("#title", Static).update(plain(text))


def run_title(run: Run | None, screen: str) -> str:
    if run is None:
        return f"{screen} · no run yet: start one with `appliance run`"
    return f"{screen} · run {run.id} · {str(run.status).upper()}"


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def fill(table: DataTable, rows: list[tuple[str, ...]], keys: list[str]) -> None:
    """Replace a table's rows, keeping the cursor on the same row index (refreshes must not jump). A string
    cell is shown as plain text (a DataTable would read it as markup)."""
    cursor = table.cursor_row
    table.clear()
    for key, row in zip(keys, rows):
        table.add_row(*(Text(inert(c), end="") if isinstance(c, str) else c for c in row), key=key)
    if rows:
        table.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
