"""The curves screen (6) draws each of the run's `evaluation.extra_sets` (the user's task sets) as a chart
with its intervals, from the same points as the HTML report; the block stays hidden in a run without one."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from appliance.evaluate import wilson
from appliance.store import Store

pytestmark = pytest.mark.anyio  # Pilot is async; anyio's plugin runs the tests on asyncio


def _measured(store: Store, iteration: int, passed: int, n: int) -> None:
    low, high = wilson(passed, n)
    store.add_eval_set(f"demo.x{iteration}.mine", paths=["/sets/mine"], policy_version=iteration, harness="builtin",
                       k=2, run_id="demo", iteration=iteration, name="/sets/mine",
                       summary={"passed": passed, "n": n, "low": low, "high": high, "tasks": n // 2, "k": 2,
                                "by_level": {}, "infra_errors": 0})


async def test_the_curves_screen_draws_a_task_set_the_run_measured(recorded_store: Store, make_app,
                                                                   settle) -> None:
    app = make_app(recorded_store)
    async with app.run_test(size=(80, 40)) as pilot:
        await settle(pilot, "6")
        assert not app.screen.query_one("#cv-extra", Static).display  # none measured yet: no block
    _measured(recorded_store, 0, 1, 8)
    _measured(recorded_store, 1, 5, 8)
    app = make_app(recorded_store)
    async with app.run_test(size=(80, 40)) as pilot:
        await settle(pilot, "6")
        block = app.screen.query_one("#cv-extra", Static)
        assert block.display
        text = str(block.render())
        low, high = wilson(5, 8)
        assert text.splitlines()[0] == "task set /sets/mine"
        assert f"latest iteration 1: 62.5% [{low:.1%}, {high:.1%}] (5/8)" in text
        assert "first  iteration 0: 12.5% [" in text
        assert text.splitlines()[1].startswith("100% ┤") and len(text.splitlines()) == 1 + 6 + 4
