"""Fault: another process holds the store. A writer holding `BEGIN IMMEDIATE` past the busy timeout makes the
loop's tick fail cleanly (`StoreBusy`: nothing written, no attempt used up, a message saying why) and the
loop carries on once it is released, with every phase run exactly once. A long read transaction (WAL) does
not block the loop at all."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.schemas import Phase, RunStatus
from appliance.store import Store
from faults.faulty_loop import BASELINE, ITERATION_1, make_loop, ticks

# Another process on the store's file: takes a write lock (BEGIN IMMEDIATE) or a read snapshot (BEGIN and
# a SELECT), says so, and holds it until its stdin has a line.
HOLD = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute(sys.argv[2])
if sys.argv[2] == "BEGIN":
    c.execute("SELECT COUNT(*) FROM events").fetchone()
print("holding", flush=True)
sys.stdin.readline()
c.execute("COMMIT")
"""


class Holder:
    def __init__(self, db: Path, begin: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db), begin], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "holding"

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def short_busy(monkeypatch: pytest.MonkeyPatch, fault_settings: Settings):
    """The busy timeout at 0.3 s (30 s in the product), for connections opened from now on."""
    monkeypatch.setattr("appliance.store.db.BUSY_TIMEOUT_MS", 300)
    s = Store(fault_settings.db_path)
    yield s
    s.close()


def _state(store: Store, run_id: str) -> tuple:
    return ([(i.index, i.phase, i.status) for i in store.iterations(run_id)], len(store.events(run_id)))


def test_a_held_write_lock_fails_the_tick_cleanly_then_the_loop_goes_on(fault_settings: Settings,
                                                                       short_busy: Store) -> None:
    said: list[str] = []
    loop = make_loop(fault_settings, short_busy, log=said.append)
    assert loop.tick() is True  # baseline evaluation
    before = _state(short_busy, loop.run.id)
    holder = Holder(fault_settings.db_path, "BEGIN IMMEDIATE")
    try:
        for _ in range(3):
            t0 = time.monotonic()
            assert loop.tick() is False
            assert time.monotonic() - t0 < 5  # waited out the busy timeout, no longer
    finally:
        holder.release()
    assert said[-1].startswith("the loop waits: another process held the store's write lock")
    assert _state(short_busy, loop.run.id) == before  # nothing written, nothing half-written
    ticks(loop)
    assert loop.phases.ran == BASELINE + ITERATION_1  # every phase exactly once
    assert short_busy.get_run(loop.run.id).status == RunStatus.DONE


def test_a_lock_taken_in_the_middle_of_a_phase_costs_no_attempt(fault_settings: Settings, short_busy: Store) -> None:
    """The store is locked between two of a phase's writes (evaluate's results): the phase is redone after the
    release, its results written once (`set_metrics` replaces), and with phase_attempts = 1 the run does not
    fail."""
    fault_settings.loop.phase_attempts = 1
    loop = make_loop(fault_settings, short_busy)
    holders: list[Holder] = []

    def evaluate(index: int) -> None:
        short_busy.set_metrics(loop.run.id, index, {"heldout_pass@1": 0.25})
        if not holders:
            holders.append(Holder(fault_settings.db_path, "BEGIN IMMEDIATE"))
        short_busy.set_metrics(loop.run.id, index, {"heldout_tasks": 4.0})

    loop.phases.faults[Phase.EVALUATE] = evaluate
    assert loop.tick() is False  # the second write found the store locked
    assert short_busy.iterations(loop.run.id)[0].phase == Phase.EVALUATE
    assert short_busy.get_run(loop.run.id).status == RunStatus.RUNNING
    holders[0].release()
    ticks(loop)
    assert loop.phases.ran == BASELINE + ITERATION_1 and short_busy.get_run(loop.run.id).status == RunStatus.DONE
    assert short_busy.metric_series(loop.run.id, "heldout_pass@1") == [(0, 0.25), (1, 0.25)]
    assert short_busy.metric_series(loop.run.id, "heldout_tasks") == [(0, 4.0), (1, 4.0)]
    assert not [e for e in short_busy.events(loop.run.id) if e.kind == "error"]


def test_a_long_read_transaction_does_not_block_the_loop(fault_settings: Settings, store: Store) -> None:
    """A reader (the TUI, a backup, a user's sqlite3 shell) keeps one snapshot open for the whole run: in WAL
    mode writers never wait for readers (the product's 30 s busy timeout would show as slow ticks)."""
    fault_settings.loop.iterations = 2
    loop = make_loop(fault_settings, store)
    holder = Holder(fault_settings.db_path, "BEGIN")
    try:
        slowest = 0.0
        while True:
            t0 = time.monotonic()
            if not loop.tick():
                break
            slowest = max(slowest, time.monotonic() - t0)
    finally:
        holder.release()
    assert store.get_run(loop.run.id).status == RunStatus.DONE
    assert len(loop.phases.ran) == len(BASELINE) + 2 * len(ITERATION_1)
    assert slowest < 2.0
