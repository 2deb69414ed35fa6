"""Evaluations of task sets the user brought (`appliance eval`, and a run's `evaluation.extra_sets` at each of
its evaluations: those rows name the run, the iteration and the set): one row per evaluation, its figures as JSON.

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
                     summary: dict[str, Any], run_id: str | None = None, iteration: int | None = None,
                     name: str | None = None) -> None:
        """Record (or replace, same id) one evaluation and its summary (pass@1, interval, per family...);
        `run_id`, `iteration` and `name` for a run's evaluation of one of its extra sets."""
        with self.write() as c:
            c.execute(
                "INSERT INTO eval_sets (id, paths, policy_version, harness, k, summary, created_at, run_id,"
                " iteration, name) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET"
                " summary = excluded.summary, policy_version = excluded.policy_version",
                (eval_id, records.to_json({"paths": paths}), policy_version, harness, k, records.to_json(summary),
                 now(), run_id, iteration, name))

    def eval_sets(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest evaluations first (`appliance eval`'s and the runs' alike)."""
        rows = self.conn.execute("SELECT * FROM eval_sets ORDER BY created_at DESC LIMIT ?", (limit,))
        return [_row(r) for r in rows]

    def run_eval_sets(self, run_id: str, name: str | None = None) -> list[dict[str, Any]]:
        """A run's evaluations of its extra sets (all, or of the set `name`), by set and iteration."""
        rows = self.conn.execute(
            "SELECT * FROM eval_sets WHERE run_id = ? AND (? IS NULL OR name = ?) ORDER BY name, iteration",
            (run_id, name, name))
        return [_row(r) for r in rows]


def _row(r: Any) -> dict[str, Any]:
    return {"id": r["id"], "paths": records.from_json(r["paths"]).get("paths", []),
            "policy_version": r["policy_version"], "harness": r["harness"], "k": r["k"],
            "summary": records.from_json(r["summary"]), "created_at": r["created_at"], "run_id": r["run_id"],
            "iteration": r["iteration"], "name": r["name"]}
