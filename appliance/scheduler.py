"""APScheduler wiring only: one interval job that calls the loop's reconciler (`Loop.tick`).

One job instance at a time (a phase can take minutes; triggers that fire meanwhile are coalesced), a
misfire grace so a late trigger still runs, the job referenced by import path, and a watch that keeps
the job on time when the wall clock is set back (`keep_on_time`). The job store is in
memory on purpose: everything the loop needs to continue lives in the appliance's own tables, so a
restarted process rebuilds the schedule from configuration and the loop from the store.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler

from appliance.errors import ApplianceError
from appliance.loop import Loop

JOB_ID = "loop-tick"
_loop: Loop | None = None
busy = threading.Event()  # set while a tick runs: the progress line says "working"


def tick() -> None:
    """The scheduled job. The loop records a failed phase and bounds its retries itself (`appliance.attempts`);
    an ApplianceError is told there, a bug is raised on to APScheduler, which logs its traceback."""
    assert _loop is not None, "scheduler.start() sets the loop before the first tick"
    busy.set()
    try:
        _loop.tick()
    except ApplianceError:
        pass  # recorded by the loop: an error event naming it, the attempt it used up
    finally:
        busy.clear()


def start(loop: Loop) -> BackgroundScheduler:
    global _loop
    _loop = loop
    # A phase runs for minutes; the triggers it swallows are expected, not worth a warning each.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
    )
    scheduler.add_job("appliance.scheduler:tick", "interval", seconds=loop.settings.loop.tick_s, id=JOB_ID,
                      replace_existing=True, next_run_time=dt.datetime.now())
    scheduler.start()
    threading.Thread(target=keep_on_time, args=(scheduler, loop.settings.loop.tick_s), daemon=True,
                     name="scheduler-clock").start()
    return scheduler


def keep_on_time(scheduler: BaseScheduler, interval_s: float) -> None:
    """Move the job's next run to now when it is further away than one interval could put it.

    APScheduler schedules by the wall clock. Set back by an hour (NTP's first sync on a box that booted
    with a wrong clock, a suspended VM, a user's `date -s`), the job's next run is an hour ahead and the
    loop would stand still for that hour; no interval job's next run is legitimately more than an interval
    away. A clock set forward needs nothing here: the runs it skipped are coalesced into one, run at once.
    This watch sleeps by the monotonic clock, and ends with the scheduler.
    """
    slack = dt.timedelta(seconds=2 * interval_s + 1)
    while scheduler.running:
        time.sleep(interval_s)
        job = scheduler.get_job(JOB_ID)
        due = job.next_run_time if job is not None else None
        if due is not None and due - dt.datetime.now(due.tzinfo) > slack:
            job.modify(next_run_time=dt.datetime.now(due.tzinfo))
