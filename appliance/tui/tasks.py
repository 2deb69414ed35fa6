"""Tasks: the pool by family × difficulty with status counts; the cell under the cursor lists its tasks
(a page at a time) and Enter opens one task: instruction, files, verifier."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from appliance.schemas import Split, Task, TaskStatus
from appliance.tui.base import Context, PollingScreen, fill, plain, run_title

if TYPE_CHECKING:
    from appliance.tui.app import ApplianceApp

PAGE = 50
COLUMNS = [("proposed", TaskStatus.PROPOSED), ("valid", TaskStatus.VALID), ("learn", TaskStatus.LEARNABLE),
           ("easy", TaskStatus.TOO_EASY), ("hard", TaskStatus.TOO_HARD), ("reject", TaskStatus.REJECTED)]


@dataclass(frozen=True, slots=True)
class TasksData:
    title: str
    matrix: tuple[tuple[Any, ...], ...]  # (family, difficulty, *counts per column, held-out)
    cell: tuple[str, int] | None
    page: int
    tasks: tuple[Task, ...]


class TasksScreen(PollingScreen):
    TITLE_TEXT = "tasks"
    BINDINGS = [
        Binding("enter", "open_task", "Open task", show=False),
        Binding("right_square_bracket", "page(1)", "Next page"),
        Binding("left_square_bracket", "page(-1)", "Prev page"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cell: tuple[str, int] | None = None
        self.page = 0

    def compose(self) -> ComposeResult:
        yield from self.compose_title()
        matrix: DataTable[str] = DataTable(id="matrix", cursor_type="row", zebra_stripes=True)
        matrix.add_columns("family", "d", *(name for name, _ in COLUMNS), "heldout")
        yield matrix
        yield Static("", id="cell", classes="subtitle")
        tasks: DataTable[str] = DataTable(id="tasks", cursor_type="row")
        tasks.add_columns("task", "status", "pass", "reason")
        yield tasks
        yield from self.compose_footer()

    def load(self, ctx: Context) -> TasksData:
        if ctx.run is None:
            return TasksData(run_title(None, "tasks"), (), None, 0, ())
        cells: dict[tuple[str, int], dict[str, int]] = {}
        for family, difficulty, split, status, n in ctx.store.task_matrix(ctx.run.id):
            counts = cells.setdefault((family, difficulty), {})
            key = "heldout" if split == Split.HELDOUT else status
            counts[key] = counts.get(key, 0) + n
        matrix = tuple((f, d, *(c.get(s, 0) for _, s in COLUMNS), c.get("heldout", 0))
                       for (f, d), c in sorted(cells.items()))
        cell = self.cell or (min(cells) if cells else None)  # the matrix's first row
        tasks = tuple(ctx.store.tasks_page(ctx.run.id, cell[0], cell[1], limit=PAGE, offset=self.page * PAGE)) \
            if cell else ()
        return TasksData(run_title(ctx.run, "tasks"), matrix, cell, self.page, tasks)

    def show(self, data: TasksData) -> None:
        self.set_title(data.title)
        fill(self.query_one("#matrix", DataTable), [tuple(str(v) for v in row) for row in data.matrix],
             keys=[f"{row[0]}\t{row[1]}" for row in data.matrix])
        if data.cell:
            self.query_one("#cell", Static).update(Content.assemble(
                plain(data.cell[0], "bold"), f" difficulty {data.cell[1]} · page {data.page + 1}"
                f" · {len(data.tasks)} shown · Enter opens a task"))
        fill(self.query_one("#tasks", DataTable),
             [(t.id, str(t.status) + (" (heldout)" if t.split == Split.HELDOUT else ""),
               "" if t.pass_rate is None else f"{t.pass_rate:.2f}", t.reject_reason or "") for t in data.tasks],
             keys=[t.id for t in data.tasks])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # refreshes refill the table and post highlights of rows the cursor has already left: skip those
        if event.data_table.id != "matrix" or event.row_key.value is None \
                or event.cursor_row != event.data_table.cursor_row:
            return
        family, difficulty = event.row_key.value.split("\t")
        cell = (family, int(difficulty))
        if cell != self.cell:
            self.cell, self.page = cell, 0
            self.reload(force=True)

    def action_page(self, delta: int) -> None:
        self.page = max(0, self.page + delta)
        self.reload(force=True)

    def action_open_task(self) -> None:
        table = self.query_one("#tasks", DataTable)
        if table.row_count:
            self.app.push_screen(TaskScreen(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "tasks" and event.row_key.value:
            self.app.push_screen(TaskScreen(event.row_key.value))
        elif event.data_table.id == "matrix":
            self.query_one("#tasks", DataTable).focus()


class TaskScreen(Screen):
    """One task: what the agent is told, the files it starts with, and how it is checked."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id

    def compose(self) -> ComposeResult:
        yield Static(plain(f"task {self.task_id}"), id="title", classes="title")
        with VerticalScroll(id="task-body"):
            yield Static("loading…", id="task")
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._load(), group="task")

    async def _load(self) -> None:
        import asyncio

        app = cast("ApplianceApp", self.app)
        task = await asyncio.to_thread(lambda: app.open_store().get_task(self.task_id))
        self.query_one("#task", Static).update(task_text(task))


def task_text(task: Task) -> Content:
    """Everything in a task is the author's (a self-proposed task's author is the policy): all plain."""
    spec = task.spec
    lines = [Content.assemble(plain(task.family, "bold"), plain(f" difficulty {task.difficulty} · {task.source} · "
                                                             f"{task.split} · "), plain(task.status, "bold"),
                           f" · pass rate {task.pass_rate:.2f}" if task.pass_rate is not None else "")]
    if task.reject_reason:
        lines.append(plain(f"rejected: {task.reject_reason}", "red"))
    lines += [Content(), Content.styled("instruction", "bold"), plain(spec.get("instruction", ""))]
    for path, text in (spec.get("files") or {}).items():
        lines += [Content(), plain(f"file {path}", "bold"), plain(text)]
    for key in ("setup", "verify", "solution"):
        if spec.get(key):
            lines += [Content(), Content.styled(key, "bold"), plain(spec[key])]
    other = {k: v for k, v in spec.items() if k not in {"instruction", "files", "setup", "verify", "solution", "id",
                                                         "family", "difficulty", "source"}}
    if other:
        lines += [Content(), Content.styled("more", "bold"), plain(json.dumps(other, indent=1, default=str))]
    return Content("\n").join(lines)

