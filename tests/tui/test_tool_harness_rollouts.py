"""The rollouts screen names each rollout's harness, and flags an iteration whose practice never called a tool
(issue 48: a public run reached 0.93 reward without ever calling one)."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from appliance.schemas import CapabilityReport, Outcome, Rollout, RolloutStatus, Split, Task, TaskStatus

pytestmark = pytest.mark.anyio  # Pilot is async; anyio's plugin runs the tests on asyncio


def practised(store, *, never_called: bool) -> None:
    store.create_run("r", {})
    store.start_iteration("r", 0, policy_version=0)
    store.start_iteration("r", 1, policy_version=1)
    store.add_task(Task("t0", "r", "text", 1, "procedural", Split.TRAIN, TaskStatus.LEARNABLE, {}))
    store.add_rollouts([Rollout(f"p{k}", "r", "t0", "g0", 1, harness, 1, RolloutStatus.FINISHED, "train",
                                Outcome.SUCCESS, 1.0) for k, harness in enumerate(("codex", "opencode"))])
    health = {"harnesses": {"codex": {"text": {"turns": 1, "tool_turns": 0}},
                            "opencode": {"text": {"turns": 2, "tool_turns": 0 if never_called else 1}}},
              "never_called_a_tool": never_called}
    store.save_report("r", 1, CapabilityReport(run_id="r", iteration=1, tool_health=health), "# report")


async def test_the_harness_of_every_rollout_and_a_round_that_never_called_a_tool(store, make_app, settle) -> None:
    practised(store, never_called=True)
    app = make_app(store)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot, "3")
        rollouts = app.screen.query_one("#rollouts", DataTable)
        assert [[str(c) for c in rollouts.get_row_at(i)[:2]] for i in range(rollouts.row_count)] == [
            ["p0", "codex"], ["p1", "opencode"]]
        flag = app.screen.query_one("#tool-flag", Static)
        assert flag.display
        assert "no practice turn of iteration 1 called a tool (codex, opencode)" in str(flag.render())


async def test_no_flag_where_practice_called_tools(store, make_app, settle) -> None:
    practised(store, never_called=False)
    app = make_app(store)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot, "3")
        assert not app.screen.query_one("#tool-flag", Static).display
