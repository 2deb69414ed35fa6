"""The rollouts screen during a held-out evaluation: the eval rollouts are shown live, one row per task."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from appliance.schemas import Outcome, Phase, Rollout, RolloutStatus, Split, Task, TaskStatus

pytestmark = pytest.mark.anyio  # Pilot is async; anyio's plugin runs the tests on asyncio


def evaluating(store, *, practice: bool = False) -> None:
    """A run in the EVALUATE phase of iteration 1: two held-out tasks x k=2, one rollout still running."""
    store.create_run("r", {})
    store.start_iteration("r", 0, policy_version=0)
    store.start_iteration("r", 1, policy_version=1)
    store.set_iteration_phase("r", 1, Phase.EVALUATE)
    for i, family in enumerate(("files", "git")):
        store.add_task(Task(f"h{i}", "r", family, 2, "procedural", Split.HELDOUT, TaskStatus.VALID, {}))
    rows = [("h0.eval1", "h0", RolloutStatus.FINISHED, Outcome.SUCCESS, 1.0),
            ("h0.eval1.1", "h0", RolloutStatus.FINISHED, Outcome.FAILURE, 0.0),
            ("h1.eval1", "h1", RolloutStatus.RUNNING, None, None),
            ("h1.eval1.1", "h1", RolloutStatus.PENDING, None, None)]
    store.add_rollouts([Rollout(rid, "r", task, None, 1, "bash-agent", 1, status, "eval", outcome, reward)
                        for rid, task, status, outcome, reward in rows])
    if practice:
        store.add_task(Task("t0", "r", "files", 2, "procedural", Split.TRAIN, TaskStatus.LEARNABLE, {}))
        store.add_rollouts([Rollout("p0", "r", "t0", "g0", 1, "bash-agent", 1, RolloutStatus.FINISHED, "train",
                                    Outcome.SUCCESS, 1.0)])


async def test_the_evaluation_in_flight_is_on_the_rollouts_screen(store, make_app, settle) -> None:
    evaluating(store, practice=True)  # practice groups exist, but the phase is EVALUATE: show what runs now
    app = make_app(store)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, "3")
        subtitle = str(app.screen.query_one("#step", Static).render())
        assert "iteration 1 · held-out evaluation · 2 tasks · 2/4 rollouts done, 1 running" in subtitle
        groups = app.screen.query_one("#groups", DataTable)
        assert [[str(c) for c in groups.get_row_at(i)[:7]] for i in range(groups.row_count)] == [
            ["h0", "files/2", "2", "0", "2", "1", "0"], ["h1", "git/2", "2", "1", "0", "0", "0"]]
        rollouts = app.screen.query_one("#rollouts", DataTable)
        assert [str(rollouts.get_row_at(i)[0]) for i in range(rollouts.row_count)] == ["h0.eval1", "h0.eval1.1"]

        await settle(pilot, "e")  # by hand: back to the practice groups of the iteration
        assert "1 groups" in str(app.screen.query_one("#step", Static).render())
        assert str(app.screen.query_one("#groups", DataTable).get_row_at(0)[0]) == "g0"
        await settle(pilot, "e")
        assert "held-out evaluation" in str(app.screen.query_one("#step", Static).render())


async def test_an_iteration_without_practice_shows_its_evaluation(store, make_app, settle) -> None:
    evaluating(store)
    store.set_iteration_phase("r", 1, Phase.DIAGNOSE)  # evaluation over; the iteration never practised
    app = make_app(store)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, "3")
        assert "held-out evaluation" in str(app.screen.query_one("#step", Static).render())
