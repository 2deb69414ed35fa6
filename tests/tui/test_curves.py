"""The curves screen (6): the held-out chart with its interval bars, the dev set's when the run has one,
pass@1 per level and family, and the training metrics, read from the same points as the HTML report."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from appliance.charts import Chart, Point, heldout_charts
from appliance.evaluate import wilson
from appliance.store import Store
from appliance.tui.curves import ROWS, binned, rate_chart

pytestmark = pytest.mark.anyio  # Pilot is async; anyio's plugin runs the tests on asyncio


def block(app, name: str) -> str:
    return str(app.screen.query_one(f"#cv-{name}", Static).render())


async def test_the_curves_screen_draws_the_recorded_run(recorded_store: Store, make_app, settle) -> None:
    app = make_app(recorded_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, "6")
        assert str(app.screen.query_one("#title", Static).render()) == "curves · run demo · RUNNING"
        heldout = block(app, "heldout")
        # iteration 1: 12 of 30 (files 6, shell 4, git 2): the point on the 40 % row, its interval 25-58 %
        assert "latest iteration 1: 40.0% [24.6%, 57.7%] (12/30)" in heldout
        assert "first  iteration 0: 26.7% [14.2%, 44.4%] (8/30)" in heldout
        rows = heldout.splitlines()[1:1 + ROWS]
        assert rows[0].startswith("100% ┤") and rows[5].startswith(" 50% ┤") and rows[10].startswith("  0% ┤")
        column = [r[15] if len(r) > 15 else " " for r in rows]  # iteration 1's slot: after the axis, centre 9
        assert "".join(column) == "    ││●││  "
        assert "dev-set pass@1 (transfer)  not evaluated in this run" in block(app, "dev")
        levels = block(app, "levels").splitlines()
        assert levels[1].startswith("L1") and "0.27 → 0.40" in levels[1] and levels[1].endswith("[0.25-0.58]")
        families = block(app, "families")
        assert [line.split()[0] for line in families.splitlines()[1:]] == ["files", "git", "shell"]
        training = block(app, "training")
        assert "GRPO loss" in training and "0.31 · steps 0-11" in training
        assert "not recorded in this run: SFT loss, groups with signal, engine IS ratio (mean)" in training


async def test_the_dev_set_curve_is_drawn_when_the_run_evaluated_it(recorded_store: Store, make_app,
                                                                     settle) -> None:
    for it, passed in ((0, 1), (1, 3)):  # what evaluate_devset records: per category n and passed, the tasks
        recorded_store.add_metrics("demo", it, {"dev_tasks": 4.0, "dev_k": 1.0, "dev_n.chore": 4.0,
                                                "dev_passed.chore": float(passed)})
    app = make_app(recorded_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, "6")
        dev = block(app, "dev")
        low, high = wilson(3, 4)
        assert f"latest iteration 1: 75.0% [{low:.1%}, {high:.1%}] (3/4)" in dev
        assert dev.splitlines()[1].startswith("100% ┤") and len(dev.splitlines()) == 1 + 6 + 4


def test_the_chart_shows_the_latest_iterations_that_fit_and_numbers_them() -> None:
    chart = Chart("held-out", "iteration", [Point(i, i / 99, max(0, i / 99 - 0.1), min(1, i / 99 + 0.1),
                                                  f"iteration {i}") for i in range(100)], percent=True)
    lines = str(rate_chart(chart, 46, ROWS)).splitlines()
    assert all(len(line) <= 46 for line in lines[:-2])  # the chart; the captions below may wrap
    assert lines[-2] == "latest iteration 99"
    assert lines[-1] == "first  iteration 0  (38 of 100 iterations drawn)"
    assert lines[-3].split() == [str(i) for i in range(62, 100, 3)]  # 62-99 drawn, a label where it fits
    assert lines[1].rstrip().endswith("●")  # the last point, 100 %, on the top row


def test_the_breakdown_and_the_report_read_the_same_points(recorded_store: Store) -> None:
    _, families, levels = heldout_charts(recorded_store, "demo", None)
    assert [c.title for c in levels] == ["L1"] and [c.title for c in families] == ["files", "git", "shell"]
    assert [round(p.y, 2) for p in levels[0].points] == [0.27, 0.4]


def test_many_steps_are_averaged_into_bins() -> None:
    assert binned([1.0, 2.0, 3.0], 8) == [1.0, 2.0, 3.0]
    assert binned([float(i) for i in range(100)], 4) == [12.0, 37.0, 62.0, 87.0]
