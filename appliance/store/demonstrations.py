"""Demonstrations: verified conversations tokenized for SFT (see appliance.demonstrations); never of a
held-out task (the m007 trigger refuses one)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from appliance.schemas import Demonstration
from appliance.store import records
from appliance.store.db import Database

DEMONSTRATION_COLUMNS = tuple(c for c in records.columns(Demonstration) if c != "id")


class DemonstrationRecords(Database):
    def add_demonstration(self, demo: Demonstration) -> bool:
        """Insert a demonstration; False when the run already has this conversation (same digest)."""
        with self.write() as c:
            cur = c.execute(
                records.insert_sql("demonstrations", DEMONSTRATION_COLUMNS, "INSERT OR IGNORE"),
                (demo.run_id, demo.task_id, demo.family, demo.difficulty, demo.origin, records.to_json(demo.messages),
                 records.pack_ints(demo.token_ids), records.pack_ints(demo.mask), demo.digest, demo.iteration,
                 records.pack_ints(demo.lengths), demo.created_at))
            return cur.rowcount > 0

    def demonstrations(self, run_id: str | None, *, levels: Iterable[int] | None = None,
                       origin: str | None = None) -> list[Demonstration]:
        sql = "SELECT * FROM demonstrations WHERE run_id IS ?"
        args: list[Any] = [run_id]
        if levels is not None:
            lv = sorted(set(levels))
            sql += f" AND difficulty IN ({','.join('?' * len(lv))})"
            args += lv
        if origin is not None:
            sql += " AND origin = ?"
            args.append(origin)
        rows = self.conn.execute(sql + " ORDER BY id", args)
        return [records.demonstration(r) for r in rows]

    def demonstrated_task_ids(self, run_id: str | None) -> set[str]:
        rows = self.conn.execute("SELECT DISTINCT task_id FROM demonstrations WHERE run_id IS ?", (run_id,))
        return {r[0] for r in rows if r[0]}

    def demonstration_counts(self, run_id: str | None) -> dict[str, int]:
        """Demonstrations per origin ("reference", "hindsight")."""
        rows = self.conn.execute("SELECT origin, COUNT(*) FROM demonstrations WHERE run_id IS ? GROUP BY origin",
                                 (run_id,))
        return {r[0]: r[1] for r in rows}
