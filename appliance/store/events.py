"""The event log (phase moves, engine moves, errors, ...) and the metric series the trainer records."""

from __future__ import annotations

import sqlite3
from typing import Any

from appliance.schemas import Event, now
from appliance.store import records
from appliance.store.db import Database

EVENT_COLUMNS = records.columns(Event)[:-1]  # the id is the table's


def insert_event(c: sqlite3.Connection, event: Event) -> int:
    """Write an event inside the caller's transaction (a state move and its event commit together)."""
    cur = c.execute(records.insert_sql("events", EVENT_COLUMNS),
                    (event.kind, event.message, event.run_id, records.to_json(event.data), event.duration_s,
                     event.created_at))
    assert cur.lastrowid is not None
    return cur.lastrowid


class EventLog(Database):
    def add_event(self, event: Event) -> int:
        with self.write() as c:
            return insert_event(c, event)

    def events(self, run_id: str | None = None, *, after_id: int = 0, kind: str | None = None,
               limit: int = 1000) -> list[Event]:
        sql = "SELECT * FROM events WHERE id > ?"
        args: list[Any] = [after_id]
        if run_id is not None:
            sql += " AND (run_id = ? OR run_id IS NULL)"
            args.append(run_id)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        rows = self.conn.execute(sql + " ORDER BY id LIMIT ?", (*args, limit))
        return [records.event(r) for r in rows]

    def add_metrics(self, run_id: str | None, step: int, values: dict[str, float]) -> None:
        t = now()
        with self.write() as c:
            c.executemany("INSERT INTO metrics (run_id, step, name, value, created_at) VALUES (?,?,?,?,?)",
                          [(run_id, step, k, float(v), t) for k, v in values.items()])

    def set_metrics(self, run_id: str | None, step: int, values: dict[str, float]) -> None:
        """`add_metrics` for results a re-run recomputes (an evaluation): the step's rows of these names are
        replaced, so a phase redone after a crash or a failed attempt leaves one value, not two."""
        t = now()
        with self.write() as c:
            c.executemany("DELETE FROM metrics WHERE run_id IS ? AND step = ? AND name = ?",
                          [(run_id, step, k) for k in values])
            c.executemany("INSERT INTO metrics (run_id, step, name, value, created_at) VALUES (?,?,?,?,?)",
                          [(run_id, step, k, float(v), t) for k, v in values.items()])

    def metric_series(self, run_id: str | None, name: str) -> list[tuple[int, float]]:
        rows = self.conn.execute(
            "SELECT step, value FROM metrics WHERE run_id IS ? AND name = ? ORDER BY step, id", (run_id, name))
        return [(r[0], r[1]) for r in rows]

    def step_metric_names(self, run_id: str, first_step: int, last_step: int) -> dict[str, int]:
        """How many optimizer steps in (first_step, last_step] recorded each metric name."""
        rows = self.conn.execute("SELECT name, COUNT(DISTINCT step) FROM metrics WHERE run_id = ? AND step > ?"
                                 " AND step <= ? GROUP BY name", (run_id, first_step, last_step))
        return {r[0]: r[1] for r in rows}

    # --- reads for the TUI: aggregates and pages, never whole tables ------------------------------
    def phase_events(self, run_id: str, iteration: int) -> list[Event]:
        """The `phase` events of one iteration (data.iteration), oldest first: the phase timeline."""
        rows = self.conn.execute(
            "SELECT * FROM events WHERE run_id = ? AND kind = 'phase' AND json_extract(data, '$.iteration') = ?"
            " ORDER BY id", (run_id, iteration))
        return [records.event(r) for r in rows]

    def latest_events(self, run_id: str | None, *, limit: int = 20, kinds: tuple[str, ...] = ()) -> list[Event]:
        """The newest events of a run (and run-less ones such as engine moves), newest first. One indexed
        query per (run, kind): a single OR/IN query would sort every matching event of a long run."""
        kinds = kinds or tuple(r[0] for r in self.conn.execute("SELECT DISTINCT kind FROM events"))
        found: list[Event] = []
        for owner in {run_id, None}:
            for kind in kinds:
                rows = self.conn.execute("SELECT * FROM events WHERE run_id IS ? AND kind = ? ORDER BY id DESC LIMIT ?",
                                         (owner, kind, limit))
                found.extend(records.event(r) for r in rows)
        return sorted(found, key=lambda e: e.id or 0, reverse=True)[:limit]

    def metric_tail(self, run_id: str | None, name: str, n: int) -> list[tuple[int, float]]:
        """The last `n` points of a metric, oldest first (what a sparkline draws)."""
        rows = self.conn.execute("SELECT step, value FROM metrics WHERE run_id IS ? AND name = ?"
                                 " ORDER BY step DESC, id DESC LIMIT ?", (run_id, name, n))
        return [(r[0], r[1]) for r in rows][::-1]
