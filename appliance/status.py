"""What `appliance status` shows: the latest run, its iterations, the engine and row counts, from the store."""

from __future__ import annotations

from typing import Any

from appliance.config import Settings
from appliance.lineage import served, served_line
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
        "engine": {"state": str(state), "policy_version": version, "weights": weights},
        "model": {**served(store), "line": served_line(store)},
        "counts": store.counts(),
    }
