"""Evaluations of task sets the user brought (`appliance eval`): one row per evaluation, its figures as JSON.

The rollouts themselves are ordinary rows of `rollouts` (no run, purpose "eval", group = the evaluation's
id), so `appliance rollout show` prints any of them; nothing the loop reads (a run's tasks, its held-out
cells) ever holds them, so they are never practised or trained on.
"""

from __future__ import annotations

from typing import Any

from appliance.schemas import now
from appliance.store import records
from appliance.store.db import Database


class EvalSets(Database):
    def add_eval_set(self, eval_id: str, *, paths: list[str], policy_version: int, harness: str, k: int,
                     summary: dict[str, Any]) -> None:
        """Record (or replace, same id) one evaluation and its summary (pass@1, interval, per family...)."""
        with self.write() as c:
            c.execute(
                "INSERT INTO eval_sets (id, paths, policy_version, harness, k, summary, created_at)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET summary = excluded.summary",
                (eval_id, records.to_json({"paths": paths}), policy_version, harness, k, records.to_json(summary),
                 now()))

    def eval_sets(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest evaluations first."""
        rows = self.conn.execute("SELECT * FROM eval_sets ORDER BY created_at DESC LIMIT ?", (limit,))
        return [{"id": r["id"], "paths": records.from_json(r["paths"]).get("paths", []),
                 "policy_version": r["policy_version"], "harness": r["harness"], "k": r["k"],
                 "summary": records.from_json(r["summary"]), "created_at": r["created_at"]} for r in rows]
