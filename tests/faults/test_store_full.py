"""Fault: the disk holding the store fills up. The store is on a small tmpfs (size=), filled by a file beside
it: a write is rolled back whole and raises `StoreFull` naming the disk and what to free (before: a raw
`sqlite3.OperationalError` out of the tick, which then could not even record its failed attempt); the loop
waits without using up an attempt, and goes on by itself once space is freed, every phase once."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.errors import StoreFull
from appliance.schemas import Event, Phase, RunStatus
from appliance.store import Store
from faults.faulty_loop import BASELINE, ITERATION_1, make_loop, ticks

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a size-limited tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_write_on_a_full_disk_is_rolled_back_and_the_store_writes_again_once_freed(small_disk: Path) -> None:
    store = Store(small_disk / "appliance.db")
    try:
        store.add_event(Event("info", "before"))
        filler = fill(small_disk)
        for _ in range(3):  # the write lock is never left held (a failed COMMIT rolled back)
            with pytest.raises(StoreFull) as full:
                store.add_event(Event("info", "x" * 200_000))
            assert not store.conn.in_transaction
        assert "the disk holding the store is full" in full.value.message and "free space" in full.value.hint
        filler.unlink()
        store.add_event(Event("info", "after"))
        assert [e.message for e in store.events()] == ["before", "after"]  # nothing half-written
    finally:
        store.close()


def test_the_loop_waits_on_a_full_disk_and_goes_on_once_freed(small_disk: Path, tmp_path: Path) -> None:
    settings: Settings = load_settings(environ={"APPLIANCE_HOME": str(small_disk)})
    settings.loop.iterations, settings.loop.families, settings.loop.phase_attempts = 1, ["files"], 1
    store = Store(settings.db_path)
    said: list[str] = []
    loop = make_loop(settings, store, log=said.append)
    fillers: list[Path] = []

    def practise(index: int) -> None:  # the disk fills in the middle of a phase, between two of its writes
        store.add_event(Event("info", "practice started", loop.run.id))
        if not fillers:
            fillers.append(fill(small_disk))
        store.add_event(Event("info", "y" * 100_000, loop.run.id))

    loop.phases.faults[Phase.PRACTISE] = practise
    try:
        for _ in range(10):
            if fillers:
                break
            loop.tick()
        for _ in range(3):
            assert loop.tick() is False
        assert said[-1].startswith("the loop waits: the disk holding the store is full"), said[-1]
        assert store.get_run(loop.run.id).status == RunStatus.RUNNING  # no attempt used up (phase_attempts 1)
        assert store.iterations(loop.run.id)[-1].phase == Phase.PRACTISE
        fillers[0].unlink()
        ticks(loop)
        assert loop.phases.ran == BASELINE + ITERATION_1  # every phase exactly once
        assert store.get_run(loop.run.id).status == RunStatus.DONE
        assert not [e for e in store.events(loop.run.id) if e.kind == "error"]
    finally:
        store.close()
