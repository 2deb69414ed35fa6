"""The appliance's memory: one SQLite file (WAL), and the only package that writes SQL.

Every state change is a committed row before the next step starts, so a crash loses nothing.

How the package is built: `Store` is one object to its callers, composed here from one class per concern,
each a module of its own over the same connection base (`db.Database`: connections, write transactions,
migration, backup):

    schema          the migrations m001..., applied in order
    lean_sqlite_utils  sqlite_utils imported without pandas (every command that opens the store pays for it)
    records         rows to typed records and back (packed token arrays, JSON columns)
    runs            runs, iterations, control requests
    tasks           the task pool, validations, the training pool
    rollouts        rollouts, model calls, samples, bulk loads
    events          the event log and metric series
    results         checkpoints, held-out evaluation cells, reports
    lineage         the engine row, lineages and policy versions
    demonstrations  SFT demonstrations
    evalsets        evaluations of the user's task sets (`appliance eval`)

A concern's SQL lives in its module only; a concern never calls another's methods (the event a state move
writes goes through `events.insert_event` inside the mover's transaction).
"""

from __future__ import annotations

from appliance.store.db import BUSY_TIMEOUT_MS, Database
from appliance.store.demonstrations import DemonstrationRecords
from appliance.store.evalsets import EvalSets
from appliance.store.events import EventLog
from appliance.store.lineage import LineageRecords
from appliance.store.records import pack_floats, pack_ints, unpack_floats, unpack_ints
from appliance.store.results import Results
from appliance.store.rollouts import RolloutRecords
from appliance.store.runs import RunRecords
from appliance.store.schema import migrations
from appliance.store.tasks import TaskPool

__all__ = ["BUSY_TIMEOUT_MS", "Store", "migrations", "pack_floats", "pack_ints", "unpack_floats", "unpack_ints"]


class Store(RunRecords, TaskPool, RolloutRecords, EventLog, Results, LineageRecords, DemonstrationRecords,
            EvalSets, Database):
    """Typed reads and writes over the appliance's SQLite file; safe to share between threads."""

    def counts(self) -> dict[str, int]:
        """Rows per table: what `appliance status` and doctor show."""
        tables = ["runs", "iterations", "tasks", "rollouts", "model_calls", "samples", "events"]
        return {t: self.scalar(f"SELECT COUNT(*) FROM {t}") for t in tables}
