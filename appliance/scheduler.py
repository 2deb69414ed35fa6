"""APScheduler wiring only: one interval job that calls the loop's reconciler (`Loop.tick`).

One job instance at a time (a phase can take minutes; triggers that fire meanwhile are coalesced), a
misfire grace so a late trigger still runs, and the job referenced by import path. The job store is in
memory on purpose: everything the loop needs to continue lives in the appliance's own tables, so a
restarted process rebuilds the schedule from configuration and the loop from the store.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from appliance.errors import ApplianceError
from appliance.loop import Loop
from appliance.schemas import Event, RunStatus

MAX_CONSECUTIVE_FAILURES = 3
_loop: Loop | None = None
_failures = 0
busy = threading.Event()  # set while a tick runs: the progress line says "working"


def tick() -> None:
    """The scheduled job; a phase that fails three times in a row fails the run (it is resumable)."""
    global _failures
    assert _loop is not None, "scheduler.start() sets the loop before the first tick"
    busy.set()
    try:
        _loop.tick()
        _failures = 0
    except ApplianceError:
        _failures += 1
        if _failures >= MAX_CONSECUTIVE_FAILURES:
            _loop.store.set_run_status(_loop.run.id, RunStatus.FAILED)
            _loop.store.add_event(Event("error", f"run failed after {_failures} failed attempts; "
                                        "fix the cause and `appliance run` continues it", _loop.run.id))
    except Exception as e:  # a bug: record it where the TUI shows it, then let APScheduler log it
        _loop.store.add_event(Event("error", f"loop crashed: {e!r}", _loop.run.id))
        _failures += 1
        raise
    finally:
        busy.clear()


def start(loop: Loop) -> BackgroundScheduler:
    global _loop, _failures
    _loop, _failures = loop, 0
    # A phase runs for minutes; the triggers it swallows are expected, not worth a warning each.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
    )
    scheduler.add_job("appliance.scheduler:tick", "interval", seconds=loop.settings.loop.tick_s, id="loop-tick",
                      replace_existing=True, next_run_time=dt.datetime.now())
    scheduler.start()
    return scheduler
