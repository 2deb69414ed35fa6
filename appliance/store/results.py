"""What an iteration produces: checkpoints, held-out evaluation cells (pass@1 per family x difficulty), and
the capability report."""

from __future__ import annotations

from typing import Any

from appliance.schemas import CapabilityReport, Checkpoint, now
from appliance.store import records
from appliance.store.db import Database

CHECKPOINT_COLUMNS = records.columns(Checkpoint)[:-1]  # the id is the table's


class Results(Database):
    # --- checkpoints ----------------------------------------------------------------------------
    def add_checkpoint(self, ckpt: Checkpoint) -> int:
        with self.write() as c:
            cur = c.execute(
                records.insert_sql("checkpoints", CHECKPOINT_COLUMNS),
                (ckpt.run_id, ckpt.policy_version, ckpt.iteration, ckpt.kind, ckpt.path,
                 records.to_json(ckpt.metrics), ckpt.created_at),
            )
            assert cur.lastrowid is not None
            ckpt.id = cur.lastrowid
            return cur.lastrowid

    def checkpoints(self, run_id: str | None = None) -> list[Checkpoint]:
        """Oldest first; all runs when `run_id` is None."""
        sql = "SELECT * FROM checkpoints"
        args: list[str] = []
        if run_id is not None:
            sql, args = sql + " WHERE run_id = ?", [run_id]
        return [records.checkpoint(r) for r in self.conn.execute(sql + " ORDER BY policy_version, id", args)]

    def latest_checkpoint(self, run_id: str | None = None) -> Checkpoint | None:
        found = self.checkpoints(run_id)
        return found[-1] if found else None

    # --- evals and reports ------------------------------------------------------------------------
    def set_eval(self, run_id: str, iteration: int, policy_version: int, family: str, difficulty: int,
                 n: int, passed: int) -> None:
        """Held-out pass@1 of one family x difficulty cell; re-running an evaluation replaces the cell."""
        with self.write() as c:
            c.execute(
                "INSERT INTO evals (run_id, iteration, policy_version, family, difficulty, n, passed, created_at)"
                " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (run_id, iteration, family, difficulty) DO UPDATE SET"
                " policy_version = excluded.policy_version, n = excluded.n, passed = excluded.passed",
                (run_id, iteration, policy_version, family, difficulty, n, passed, now()),
            )

    def evals(self, run_id: str, iteration: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM evals WHERE run_id = ?"
        args: list[Any] = [run_id]
        if iteration is not None:
            sql += " AND iteration = ?"
            args.append(iteration)
        rows = self.conn.execute(sql + " ORDER BY iteration, family, difficulty", args)
        return [{k: r[k] for k in ("iteration", "policy_version", "family", "difficulty", "n", "passed")} for r in rows]

    def heldout_curve(self, run_id: str) -> list[tuple[int, float]]:
        """Held-out pass@1 per iteration over all families (from `evals`)."""
        rows = self.conn.execute("SELECT iteration, 1.0 * SUM(passed) / SUM(n) FROM evals WHERE run_id = ?"
                                 " AND n > 0 GROUP BY iteration ORDER BY iteration", (run_id,))
        return [(r[0], r[1]) for r in rows]

    def save_report(self, run_id: str, iteration: int, report: CapabilityReport, markdown: str) -> None:
        with self.write() as c:
            c.execute(
                "INSERT INTO reports (run_id, iteration, json, markdown, created_at) VALUES (?,?,?,?,?)"
                " ON CONFLICT (run_id, iteration) DO UPDATE SET json = excluded.json, markdown = excluded.markdown",
                (run_id, iteration, records.to_json(report.as_dict()), markdown, now()),
            )

    def report(self, run_id: str, iteration: int | None = None) -> tuple[CapabilityReport, str] | None:
        """The report of one iteration, or the latest one when `iteration` is None (any build's report:
        `CapabilityReport.of` reads what older builds stored)."""
        if iteration is None:
            row = self.one("SELECT json, markdown FROM reports WHERE run_id = ?"
                           " ORDER BY iteration DESC LIMIT 1", run_id)
        else:
            row = self.one("SELECT json, markdown FROM reports WHERE run_id = ? AND iteration = ?", run_id, iteration)
        return (CapabilityReport.of(records.from_json(row["json"])), row["markdown"]) if row else None

    def report_iterations(self, run_id: str) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT iteration FROM reports WHERE run_id = ? ORDER BY iteration",
                                                (run_id,))]
