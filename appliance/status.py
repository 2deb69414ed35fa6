"""What `appliance status` shows: the latest run, its iterations, the live loop (its heartbeat, the phase in
flight's progress, the pending request), the engine and row counts, from the store."""

from __future__ import annotations

import time
from typing import Any

from appliance.config import Settings
from appliance.control import loop_alive
from appliance.lineage import served, served_line
from appliance.schemas import Run
from appliance.store import Store


def read_status(settings: Settings) -> dict[str, Any]:
    store = Store(settings.db_path)
    run = store.latest_run()
    state, version, weights = store.engine_state()
    return {
        "store": str(settings.db_path),
        "run": {"id": run.id, "status": str(run.status)} if run else None,
        "iterations": [
            {"index": it.index, "phase": str(it.phase), "status": str(it.status), "policy_version": it.policy_version}
            for it in (store.iterations(run.id) if run else [])
        ],
        "loop": loop_status(store, run),
        "engine": {"state": str(state), "policy_version": version, "weights": weights},
        "model": {**served(store), "line": served_line(store)},
        "counts": store.counts(),
    }


def loop_status(store: Store, run: Run | None) -> dict[str, Any]:
    """The loop running `run`, by its heartbeat: alive or not (and why not), the progress of the phase in flight
    (rollouts done of those drawn, in flight, elapsed; a training phase's steps done of its total; None
    between phases) and the requests it has not
    answered yet, with one line for a person."""
    at = time.time()
    beat = store.heartbeat()
    alive, why = loop_alive(store, run.id, at) if run else (False, "there is no run")
    pending = [{"id": c.id, "command": str(c.command), "age_s": round(at - c.created_at, 1)}
               for c in (store.pending_controls(run.id) if run else [])]
    progress = beat.progress if alive and beat is not None else None
    if not alive:
        line = f"loop: none running ({why})"
    else:
        assert beat is not None  # alive: it beat
        line = f"loop: pid {beat.pid}, heartbeat {beat.age_s(at):.0f} s ago"
        if progress and progress.get("steps_total"):  # a training phase, at its safe points between steps
            line += (f"; {progress['phase']} of iteration {progress['iteration']}: training step "
                     f"{progress['steps_done']}/{progress['steps_total']} done, {clock(progress['elapsed_s'])} elapsed")
            if progress.get("left_s") is not None:
                line += f", about {clock(progress['left_s'])} left"
        elif progress:
            line += (f"; {progress['phase']} of iteration {progress['iteration']}: {progress['done']}/"
                     f"{progress['total']} rollouts done, {progress['in_flight']} in flight, "
                     f"{clock(progress['elapsed_s'])} elapsed")
            if progress.get("total") and progress.get("left_s") is not None:
                line += f", about {clock(progress['left_s'])} left for those drawn so far"
        else:
            line += "; between phases"
    if pending:
        line += "; pending: " + ", ".join(str(p["command"]) for p in pending)
    return {"alive": alive, "run_id": beat.run_id if beat else None, "pid": beat.pid if beat else None,
            "heartbeat_age_s": round(beat.age_s(at), 1) if beat else None, "progress": progress,
            "pending": pending, "line": line}


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"
