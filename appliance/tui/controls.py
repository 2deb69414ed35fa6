"""Controls: pause, resume, step, stop after the iteration, each behind a yes/no confirmation; the run's
status as the loop reports it, and the history of requests with the loop's answers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from appliance import control
from appliance.errors import ApplianceError
from appliance.schemas import Control, ControlCommand, RunStatus
from appliance.tui.base import Context, PollingScreen, fill, inert, plain, run_title

LABELS = {
    ControlCommand.PAUSE: ("p", "pause"),
    ControlCommand.RESUME: ("r", "resume"),
    ControlCommand.STEP: ("s", "step one phase"),
    ControlCommand.STOP_AFTER_ITERATION: ("x", "stop after this iteration"),
    ControlCommand.STOP_NOW: ("X", "stop now, at the next safe point (`appliance run` continues the run)"),
}


@dataclass(frozen=True, slots=True)
class ControlsData:
    title: str
    status: RunStatus | None
    state: str
    history: tuple[Control, ...]


class ControlsScreen(PollingScreen):
    TITLE_TEXT = "controls"
    BINDINGS = [
        Binding("p", "request('pause')", "Pause"),
        Binding("r", "request('resume')", "Resume"),
        Binding("s", "request('step')", "Step"),
        Binding("x", "request('stop_after_iteration')", "Stop after it."),
        Binding("X", "request('stop_now')", "Stop now"),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_title()
        yield Static("", id="run-state", classes="block")
        yield Static("", id="commands", classes="block")
        history: DataTable[str] = DataTable(id="history", cursor_type="row")
        history.add_columns("#", "command", "answer", "result")
        yield history
        yield from self.compose_footer()

    def load(self, ctx: Context) -> ControlsData:
        if ctx.run is None:
            return ControlsData(run_title(None, "controls"), None, "", ())
        iterations = ctx.store.iterations(ctx.run.id)
        where = f"iteration {iterations[-1].index}, phase {iterations[-1].phase}" if iterations else "no iteration yet"
        return ControlsData(run_title(ctx.run, "controls"), ctx.run.status, where,
                            tuple(ctx.store.controls(ctx.run.id, limit=20)))

    def show(self, data: ControlsData) -> None:
        self.set_title(data.title)
        if data.status is None:
            self.query_one("#run-state", Static).update("nothing to control: no run in this store")
            self.query_one("#commands", Static).update("")
        else:
            self.query_one("#run-state", Static).update(Content.assemble(
                "the loop reports: ", (f" {str(data.status).upper()} ", "bold reverse"), " · ", plain(data.state)))
            lines = []
            for command, (key, label) in LABELS.items():
                ok = data.status in control.ALLOWED[command]
                lines.append(Content.assemble((key, "bold"), f" {label}") if ok
                             else Content.styled(f"{key} {label} (not while {data.status})", "dim"))
            self.query_one("#commands", Static).update(Content("\n").join(lines))
        fill(self.query_one("#history", DataTable),
             [(str(c.id), str(c.command), str(c.status), c.result or "") for c in data.history],
             keys=[str(c.id) for c in data.history])

    def action_request(self, command: str) -> None:
        cmd = ControlCommand(command)
        label = LABELS[cmd][1]

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._send(cmd), group="control")

        self.app.push_screen(ConfirmScreen(f"{label.capitalize()}?"), confirmed)

    async def _send(self, command: ControlCommand) -> None:
        app = self.appliance
        self.notify("the live loop answers within a second or two; the request shows below until then",
                    title=f"{command} requested", timeout=4)
        try:
            answered = await asyncio.to_thread(control.request, app.open_store(), command, run_id=app.run_id,
                                               timeout_s=app.control_timeout_s)
        except ApplianceError as e:
            self.notify(inert(f"{e.message}\n{e.hint}"), title=f"{command} failed", severity="error", timeout=8,
                        markup=False)
        else:
            self.notify(inert(answered.result or str(answered.status)), title=f"{command}: {answered.status}",
                        markup=False)
        self.reload(force=True)


class ConfirmScreen(ModalScreen[bool]):
    """y / Enter confirms, n / Escape cancels: a stray key never stops a night's training."""

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(plain(self.question, "bold"))
            yield Static(Content.assemble(("y", "bold"), " yes    ", ("n", "bold"), " no"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
