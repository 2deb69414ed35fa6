"""Every screen at 80×24 on a store holding a recorded run (regenerate with `--snapshot-update` and
review the SVGs in tests/tui/__snapshots__ when a screen changes on purpose)."""

from __future__ import annotations

import pytest

SIZE = (80, 24)

SCREENS = {
    "overview": (),
    "tasks": ("2",),
    "task_detail": ("2", "tab", "down", "down", "enter"),
    "tasks_drilldown": ("2", "down", "down", "down"),
    "rollouts": ("3",),
    "trajectory": ("3", "tab", "enter"),
    "reports": ("4",),
    "reports_diff": ("4", "d"),
    "controls": ("5",),
    "curves": ("6",),
}


@pytest.mark.parametrize("name", list(SCREENS))
def test_screen(name, recorded_store, make_app, snap_compare, settle) -> None:
    async def run_before(pilot) -> None:
        await settle(pilot, *SCREENS[name])

    assert snap_compare(make_app(recorded_store), terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("key", ["1", "2", "3", "4", "5", "6"])
def test_screens_without_a_run(key, store, make_app, snap_compare, settle) -> None:
    async def run_before(pilot) -> None:
        await settle(pilot, key)

    assert snap_compare(make_app(store), terminal_size=SIZE, run_before=run_before)
