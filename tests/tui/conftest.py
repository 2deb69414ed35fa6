"""Fixtures for the TUI tests: a store holding a recorded run, and the app wired to it with a fixed
clock and probe so the screens render the same on every machine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.store import Store
from appliance.tui.app import ApplianceApp
from recorded_run import T0, record_run, toy_decoder  # tests/recorded_run.py


@pytest.fixture
def recorded_store(store: Store) -> Store:
    record_run(store)
    return store


@pytest.fixture
def make_app() -> Callable[..., ApplianceApp]:
    def make(store: Store, **kwargs) -> ApplianceApp:
        kwargs.setdefault("probe", lambda: "CPU 37% · RAM 5.2/23.5 GiB")
        kwargs.setdefault("clock", lambda: T0 + 3 * 60 + 3 * 477 + 30)
        kwargs.setdefault("decoder_factory", lambda: toy_decoder)
        kwargs.setdefault("refresh_s", 0.2)
        return ApplianceApp(lambda: store, **kwargs)

    return make


async def _idle(pilot) -> None:
    # a load finishes and its show() may start another (a drill-down): a few rounds settle both
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def _settle(pilot, *keys: str) -> None:
    """Press keys one by one, letting the screen's workers read the store and the widgets redraw."""
    for key in keys:
        await pilot.press(key)
        await _idle(pilot)
    await _idle(pilot)


@pytest.fixture
def settle():
    return _settle


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """`tmux(*args)` against a private server (see tmux_pane.py), killed at the end of the test."""
    from tmux_pane import tmux_server

    with tmux_server(tmp_path / "tmux.sock") as run:
        yield run
