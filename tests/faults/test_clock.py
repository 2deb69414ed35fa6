"""Fault: the wall clock jumps. APScheduler schedules by it: set back, the loop's next run would be as far
away as the jump; set forward, the runs it skipped must not pile up or be dropped. Injected through the
real scheduler's job (its next run time moved as the jump would move it); the loop keeps ticking."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from appliance import scheduler
from appliance.config import Settings
from appliance.store import Store
from faults.faulty_loop import make_loop


def _ticks_within(loop, seconds: float, count: int = 3) -> bool:
    start = len(loop.phases.ran)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(loop.phases.ran) >= start + count:
            return True
        time.sleep(0.02)
    return False


def _jump(sched, delta: dt.timedelta) -> None:
    """What a clock jump of -delta does to the job: its next run is delta away from the new now."""
    job = sched.get_job(scheduler.JOB_ID)
    job.modify(next_run_time=dt.datetime.now(job.next_run_time.tzinfo) + delta)


def test_the_loop_ticks_through_clock_jumps(fault_settings: Settings, store: Store) -> None:
    fault_settings.loop.iterations = 1000  # the recorders never run out of phases in this test
    fault_settings.loop.tick_s = 0.1
    loop = make_loop(fault_settings, store)
    sched = scheduler.start(loop)
    try:
        assert _ticks_within(loop, 10)
        _jump(sched, dt.timedelta(days=1))  # the clock set back by a day
        assert _ticks_within(loop, 10), "the loop waited for the old clock"
        _jump(sched, -dt.timedelta(hours=1))  # set forward by an hour: an hour of missed runs
        assert _ticks_within(loop, 10), "the missed runs were dropped and none ran"
        job = sched.get_job(scheduler.JOB_ID)
        assert job.next_run_time - dt.datetime.now(job.next_run_time.tzinfo) < dt.timedelta(seconds=1)
    finally:
        sched.shutdown(wait=True)
    time.sleep(0.3)  # one watch interval: the watch ends with the scheduler
    assert not [t for t in threading.enumerate() if t.name == "scheduler-clock"]
    ran = len(loop.phases.ran)
    time.sleep(0.3)
    assert len(loop.phases.ran) == ran  # and nothing ticks after the shutdown


def test_the_watch_leaves_an_on_time_job_alone(fault_settings: Settings, store: Store,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from apscheduler.job import Job

    moved: list[dict] = []
    modify = Job.modify
    monkeypatch.setattr(Job, "modify", lambda self, **changes: (moved.append(changes), modify(self, **changes))[1])
    fault_settings.loop.iterations = 1000
    fault_settings.loop.tick_s = 0.1
    loop = make_loop(fault_settings, store)
    sched = scheduler.start(loop)
    try:
        assert _ticks_within(loop, 10, count=10)
    finally:
        sched.shutdown(wait=True)
    assert moved == []
