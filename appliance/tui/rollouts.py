"""Rollouts: the GRPO groups of one step (a page at a time), the rollouts of the group under the cursor,
and Enter opens a rollout's trajectory. While an iteration evaluates (and for an iteration without practice,
such as the baseline) it shows the held-out rollouts instead, one row per task; `e` switches by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from appliance.schemas import Outcome, Phase, Rollout, RolloutStatus
from appliance.tui.base import Context, PollingScreen, fill, plain, run_title
from appliance.tui.trajectory import TrajectoryScreen

PAGE = 50


@dataclass(frozen=True, slots=True)
class RolloutsData:
    title: str
    subtitle: str
    groups: tuple[tuple[str, ...], ...]
    group_ids: tuple[str, ...]
    rollouts: tuple[Rollout, ...]
    flag: str = ""  # what the iteration's report says is wrong with its practice (no tool ever called)


class RolloutsScreen(PollingScreen):
    TITLE_TEXT = "rollouts"
    BINDINGS = [
        Binding("right_square_bracket", "page(1)", "Next page"),
        Binding("left_square_bracket", "page(-1)", "Prev page"),
        Binding("full_stop", "iteration(1)", "Next it."),
        Binding("comma", "iteration(-1)", "Prev it."),
        Binding("e", "evaluation", "Held-out / practice", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.iteration: int | None = None  # None: follow the latest iteration
        self.page = 0
        self.group: str | None = None
        self._latest = 0
        self.evaluation: bool | None = None  # None: held-out rollouts while the iteration evaluates
        self._showing_evaluation = False

    def compose(self) -> ComposeResult:
        yield from self.compose_title()
        yield Static("", id="step", classes="subtitle")
        flag = Static("", id="tool-flag")
        flag.display = False  # shown only for an iteration whose practice never called a tool
        yield flag
        groups: DataTable[str] = DataTable(id="groups", cursor_type="row", zebra_stripes=True)
        groups.add_columns("group", "task", "n", "run", "done", "ok", "infra", "reward")
        yield groups
        rollouts: DataTable[str] = DataTable(id="rollouts", cursor_type="row")
        rollouts.add_columns("rollout", "harness", "status", "outcome", "reward", "turns", "error")
        yield rollouts
        yield from self.compose_footer()

    def load(self, ctx: Context) -> RolloutsData:
        if ctx.run is None:
            return RolloutsData(run_title(None, "rollouts"), "", (), (), ())
        store, run_id = ctx.store, ctx.run.id
        iterations = store.iterations(run_id)
        self._latest = iterations[-1].index if iterations else 0
        it = self._latest if self.iteration is None else self.iteration
        total = store.group_count(run_id, it)
        phase = next((i.phase for i in iterations if i.index == it), None)
        wanted = self.evaluation if self.evaluation is not None else (phase == Phase.EVALUATE or total == 0)
        held_out = self.load_evaluation(ctx, it) if wanted else None
        self._showing_evaluation = held_out is not None
        if held_out is not None:
            return held_out
        pages = max(1, -(-total // PAGE))
        self.page = min(self.page, pages - 1)
        groups = store.rollout_groups(run_id, it, limit=PAGE, offset=self.page * PAGE)
        group = self.group if self.group in {g["group_id"] for g in groups} else \
            (groups[0]["group_id"] if groups else None)
        rollouts = tuple(store.rollouts(run_id, group_id=group)) if group else ()
        subtitle = (f"iteration {it} · {total} groups · page {self.page + 1}/{pages} · "
                    "Enter opens a trajectory")
        rows = tuple((g["group_id"] or "-", f"{g['family'] or '?'}/{g['difficulty'] or '?'}", str(g["n"]),
                      str(g["running"]), str(g["finished"]), str(int(g["success"])), str(int(g["infra_error"])),
                      "-" if g["reward"] is None else f"{g['reward']:.2f}") for g in groups)
        return RolloutsData(run_title(ctx.run, "rollouts"), subtitle, rows, tuple(g["group_id"] or "" for g in groups),
                            rollouts, tool_flag(ctx, it))

    def load_evaluation(self, ctx: Context, it: int) -> RolloutsData | None:
        """The held-out rollouts of iteration `it` as rows of one task each (they have no GRPO group);
        None when the iteration has none yet."""
        assert ctx.run is not None
        tallies = eval_tallies(ctx.store.rollouts(ctx.run.id, iteration=it, purpose="eval"))
        if not tallies:
            return None
        pages = max(1, -(-len(tallies) // PAGE))
        self.page = min(self.page, pages - 1)
        shown = tallies[self.page * PAGE:(self.page + 1) * PAGE]
        keys = tuple(t["task_id"] for t in shown)
        task = self.group if self.group in keys else (keys[0] if keys else None)
        done = sum(t["finished"] for t in tallies)
        n = sum(t["n"] for t in tallies)
        running = sum(t["running"] for t in tallies)
        subtitle = (f"iteration {it} · held-out evaluation · {len(tallies)} tasks · {done}/{n} rollouts done, "
                    f"{running} running · page {self.page + 1}/{pages} · Enter opens a trajectory")
        rows = []
        for t in shown:
            spec = ctx.store.get_task(t["task_id"])
            rows.append((t["task_id"], f"{spec.family}/{spec.difficulty}", str(t["n"]), str(t["running"]),
                         str(t["finished"]), str(t["success"]), str(t["infra_error"]),
                         "-" if t["reward"] is None else f"{t['reward']:.2f}"))
        selected: list[Rollout] = next((t["rollouts"] for t in shown if t["task_id"] == task), [])
        return RolloutsData(run_title(ctx.run, "rollouts"), subtitle, tuple(rows), keys, tuple(selected))

    def action_evaluation(self) -> None:
        self.evaluation = not self._showing_evaluation
        self.page, self.group = 0, None
        self.reload(force=True)

    def show(self, data: RolloutsData) -> None:
        self.set_title(data.title)
        self.query_one("#step", Static).update(plain(data.subtitle))
        flag = self.query_one("#tool-flag", Static)
        flag.update(plain(data.flag, "bold red"))
        flag.display = bool(data.flag)
        fill(self.query_one("#groups", DataTable), list(data.groups), keys=list(data.group_ids))
        fill(self.query_one("#rollouts", DataTable),
             [(r.id, r.harness, str(r.status), str(r.outcome or ""), "-" if r.reward is None else f"{r.reward:.2f}",
               str(r.turns), (r.error or "")[:40]) for r in data.rollouts], keys=[r.id for r in data.rollouts])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "groups" or event.row_key.value is None \
                or event.cursor_row != event.data_table.cursor_row:
            return
        if event.row_key.value != self.group:
            self.group = event.row_key.value
            self.reload(force=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "rollouts" and event.row_key.value:
            self.app.push_screen(TrajectoryScreen(event.row_key.value))
        elif event.data_table.id == "groups":
            self.query_one("#rollouts", DataTable).focus()

    def action_page(self, delta: int) -> None:
        self.page, self.group = max(0, self.page + delta), None
        self.reload(force=True)

    def action_iteration(self, delta: int) -> None:
        current = self._latest if self.iteration is None else self.iteration
        target = min(self._latest, max(0, current + delta))
        self.iteration = None if target == self._latest else target
        self.page, self.group = 0, None
        self.reload(force=True)


def tool_flag(ctx: Context, iteration: int) -> str:
    """The warning for an iteration whose practice never called a tool (its report's tool health): rewards
    that came without acting (tool_health.py)."""
    assert ctx.run is not None
    found = ctx.store.report(ctx.run.id, iteration)
    health = found[0].tool_health if found else None
    if not health or not health.get("never_called_a_tool"):
        return ""
    harnesses = ", ".join(health.get("harnesses") or {})
    return f"no practice turn of iteration {iteration} called a tool ({harnesses}): its rewards came without acting"


def eval_tallies(rollouts: list[Rollout]) -> list[dict[str, Any]]:
    """Per held-out task (in task order): its k rollouts and their tallies, as the groups table shows them."""
    by_task: dict[str, list[Rollout]] = {}
    for r in rollouts:
        if r.task_id:
            by_task.setdefault(r.task_id, []).append(r)
    out = []
    for task_id, rs in sorted(by_task.items()):
        rewards = [r.reward for r in rs if r.reward is not None]
        out.append({"task_id": task_id, "rollouts": rs, "n": len(rs),
                    "running": sum(r.status == RolloutStatus.RUNNING for r in rs),
                    "finished": sum(r.status == RolloutStatus.FINISHED for r in rs),
                    "success": sum(r.outcome == Outcome.SUCCESS for r in rs),
                    "infra_error": sum(r.outcome == Outcome.INFRA_ERROR for r in rs),
                    "reward": sum(rewards) / len(rewards) if rewards else None})
    return out
