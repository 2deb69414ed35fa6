"""Every screen opens on a store seeded with hostile text (terminal escapes and bracket text in
instructions, reasons, observations, file names, errors): nothing is read as markup, nothing closes the
window, and the text is shown, its control characters as visible escapes."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from appliance.store import Store
from hostile import BRACKETS, HOSTILE, RUN, hostile_decoder, seed_hostile  # tests/hostile.py

pytestmark = pytest.mark.anyio  # Pilot is async; anyio's plugin runs the tests on asyncio

SCREENS = {
    "overview": (),
    "tasks": ("2",),
    "task": ("2", "tab", "enter"),
    "rollouts": ("3",),
    "trajectory": ("3", "tab", "enter"),
    "reports": ("4",),
    "reports_diff": ("4", "d"),
    "controls": ("5",),
    "curves": ("6",),
}


def shown(app) -> str:
    """All the text the current screen's widgets hold."""
    parts = [str(w.render()) for w in app.screen.query(Static)]
    for table in app.screen.query(DataTable):
        parts += [str(cell) for row in range(table.row_count) for cell in table.get_row_at(row)]
    return "\n".join(parts)


@pytest.mark.parametrize("name", list(SCREENS))
async def test_every_screen_opens_on_hostile_text(name, store: Store, make_app, settle) -> None:
    seed_hostile(store)
    for family in (HOSTILE, BRACKETS):  # a family name is stored text too (the curves screen lists them)
        store.set_eval(RUN, 0, 0, family, 1, 4, 2)
    app = make_app(store, decoder_factory=lambda: hostile_decoder)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, *SCREENS[name])
        text = shown(app)
        assert app.is_running and app._exception is None
        assert "cannot show this screen" not in text, text
        assert "\x1b" not in text and "\x07" not in text
        if name not in ("rollouts", "controls", "overview"):  # the others show a stored text in full
            assert "[1 a=b:c]" in text, text
        if name in ("task", "trajectory", "overview", "curves"):
            assert "\\x1b]52;c;" in text, text  # shown as an escape, not dropped
    assert app._exception is None


def test_the_seed_holds_what_the_issue_names(store: Store) -> None:
    seed_hostile(store)
    task = store.get_task("files-1-0")
    assert BRACKETS in task.spec["instruction"] and BRACKETS in (task.reject_reason or "")
    assert any("\x1b]0;" in name for name in task.spec["files"])
