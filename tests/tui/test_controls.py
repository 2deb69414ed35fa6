"""Pilot tests of the controls screen against a real store and a stand-in loop that answers requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from appliance.schemas import ControlStatus, Phase, RunStatus
from appliance.testing import ControlConsumer

pytestmark = pytest.mark.anyio  # Pilot is async; anyio's plugin runs the tests on asyncio


async def test_pause_then_the_loop_reports_paused(recorded_store, make_app, settle) -> None:
    stop = ControlConsumer(recorded_store, "demo").run_in_thread()
    try:
        app = make_app(recorded_store)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "5", "p")
            assert app.screen.__class__.__name__ == "ConfirmScreen"
            await settle(pilot, "y")
            assert recorded_store.get_run("demo").status == RunStatus.PAUSED
            (answered,) = recorded_store.controls("demo")
            assert (answered.command, answered.status, answered.result) == ("pause", ControlStatus.DONE, "paused")
            await pilot.pause(0.3)  # one refresh tick
            await settle(pilot)
            assert "PAUSED" in str(app.screen.query_one("#run-state", Static).render())
            history = app.screen.query_one("#history", DataTable)
            assert [str(c) for c in history.get_row_at(0)[1:3]] == ["pause", "done"]

            await settle(pilot, "s", "y")  # step: one phase, still paused
            assert recorded_store.iterations("demo")[-1].phase == Phase.EVALUATE
            assert recorded_store.get_run("demo").status == RunStatus.PAUSED
            await settle(pilot, "r", "enter")  # enter confirms too
            assert recorded_store.get_run("demo").status == RunStatus.RUNNING
    finally:
        stop.set()


async def test_stop_now_behind_its_confirmation(recorded_store, make_app, settle) -> None:
    consumer = ControlConsumer(recorded_store, "demo")
    stop = consumer.run_in_thread()
    try:
        app = make_app(recorded_store)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, "5", "X")
            assert app.screen.__class__.__name__ == "ConfirmScreen"
            await settle(pilot, "y")
            assert consumer.stopped_now and recorded_store.get_run("demo").status == RunStatus.STOPPED
            (answered,) = recorded_store.controls("demo")
            assert (answered.command, answered.status) == ("stop_now", ControlStatus.DONE)
    finally:
        stop.set()


async def test_no_cancels_and_nothing_is_sent(recorded_store, make_app, settle) -> None:
    app = make_app(recorded_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, "5", "x", "n")
        await settle(pilot, "p", "escape")
    assert recorded_store.controls("demo") == []
    assert recorded_store.get_run("demo").status == RunStatus.RUNNING


async def test_a_command_the_run_cannot_take_is_explained(recorded_store, make_app, settle) -> None:
    app = make_app(recorded_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, "5", "r", "y")  # resume a running run
        messages = [n.message for n in app._notifications]
    assert any("cannot resume run 'demo': it is running" in m for m in messages)
    assert recorded_store.controls("demo") == []


async def test_no_loop_answering_is_explained(recorded_store, make_app, settle) -> None:
    app = make_app(recorded_store, control_timeout_s=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, "5", "p", "y")
        messages = [n.message for n in app._notifications]
    assert any("no loop is running" in m for m in messages)  # no heartbeat in the store: nothing is queued
    assert recorded_store.controls("demo") == []
    assert recorded_store.get_run("demo").status == RunStatus.RUNNING


async def test_an_unreadable_store_is_shown_not_raised(tmp_path: Path, make_app, settle) -> None:
    from appliance.store import Store

    (tmp_path / "store.db").mkdir()  # a directory where the file should be: sqlite cannot open it
    app = make_app(None)
    app.store_factory = lambda: Store(tmp_path / "store.db")
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("1", "2", "3", "4", "5"):
            await settle(pilot, key)
            assert "cannot open the store" in str(app.screen.query_one("#problem", Static).render())
        assert app.is_running


async def test_a_missing_run_is_named_with_a_hint(recorded_store, make_app, settle) -> None:
    app = make_app(recorded_store, run_id="nope")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, "3")
        problem = str(app.screen.query_one("#problem", Static).render())
    assert "no run 'nope'" in problem and "appliance status" in problem


async def test_the_run_window_detaches_and_closes_when_the_run_stops(recorded_store, make_app, settle) -> None:
    """`appliance run`'s own TUI: the footer says q detaches (the run goes on); SIGTERM's event closes it."""
    import threading

    stop = threading.Event()
    app = make_app(recorded_store, detach=True, until=stop)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.active_bindings["q"].binding.description == "Detach"
        stop.set()
        await pilot.pause(0.5)
        assert not app.is_running
    assert recorded_store.controls("demo") == []  # closing the window sent nothing to the loop
