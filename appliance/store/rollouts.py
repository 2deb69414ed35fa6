"""Rollouts and what they leave: the model calls recorded at the proxy and the training samples built from
them. A rollout's state moves only along `ROLLOUT_TRANSITIONS`; finishing it and writing its samples is one
transaction. Bulk loads (benchmarks, tests, imports) take one transaction and skip the per-row checks."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from appliance.errors import NotFoundError, TransitionError
from appliance.schemas import (
    ROLLOUT_TRANSITIONS,
    ModelCall,
    Outcome,
    Rollout,
    RolloutStatus,
    Sample,
    check_transition,
    now,
)
from appliance.store import records
from appliance.store.db import Database, where

ROLLOUT_COLUMNS = records.columns(Rollout)
CALL_COLUMNS = records.columns(ModelCall)[1:]  # the id is the table's
SAMPLE_COLUMNS = (*records.columns(Sample), "created_at")


def _rollout_values(r: Rollout) -> tuple[Any, ...]:
    return tuple(getattr(r, col) for col in ROLLOUT_COLUMNS)  # the record's fields in the table's column order


def _call_values(m: ModelCall, seq: int) -> tuple[Any, ...]:
    return (m.rollout_id, seq, m.status, records.to_json(m.request), records.to_json(m.response),
            records.pack_ints(m.prompt_ids), records.pack_ints(m.completion_ids), records.pack_floats(m.logprobs),
            m.policy_version, m.latency_s, m.error, m.created_at, m.temperature)


class RolloutRecords(Database):
    # --- rollouts -------------------------------------------------------------------------------
    def add_rollout(self, rollout: Rollout, route_hash: str | None = None) -> bool:
        with self.write() as c:
            cur = c.execute(records.insert_sql("rollouts", (*ROLLOUT_COLUMNS, "route_hash"), "INSERT OR IGNORE"),
                            (*_rollout_values(rollout), route_hash))
            return cur.rowcount == 1

    def get_rollout(self, rollout_id: str) -> Rollout:
        row = self.one("SELECT * FROM rollouts WHERE id = ?", rollout_id)
        if row is None:
            raise NotFoundError(f"no rollout {rollout_id!r}")
        return records.rollout(row)

    def rollout_by_route(self, route_hash: str) -> Rollout | None:
        row = self.one("SELECT * FROM rollouts WHERE route_hash = ?", route_hash)
        return records.rollout(row) if row else None

    def set_rollout_route(self, rollout_id: str, route_hash: str) -> None:
        """Give a rollout its proxy route (the hash of its secret token); an earlier one is retired."""
        with self.write() as c:
            self._retire_route(c, rollout_id)
            cur = c.execute("UPDATE rollouts SET route_hash = ? WHERE id = ?", (route_hash, rollout_id))
            if cur.rowcount == 0:
                raise NotFoundError(f"no rollout {rollout_id!r}", "add the rollout before registering its route")

    def route_retired(self, route_hash: str) -> bool:
        """Whether this route once belonged to a rollout and was retired (requeued, or given a new route)."""
        return self.one("SELECT 1 FROM retired_routes WHERE route_hash = ?", route_hash) is not None

    @staticmethod
    def _retire_route(c: sqlite3.Connection, rollout_id: str) -> None:
        c.execute("INSERT OR IGNORE INTO retired_routes (route_hash, rollout_id, retired_at) "
                  "SELECT route_hash, id, ? FROM rollouts WHERE id = ? AND route_hash IS NOT NULL", (now(), rollout_id))
        c.execute("UPDATE rollouts SET route_hash = NULL WHERE id = ?", (rollout_id,))

    def rollouts(self, run_id: str | None = None, *, iteration: int | None = None, group_id: str | None = None,
                 purpose: str | None = None, status: RolloutStatus | None = None) -> list[Rollout]:
        sql, args = where("SELECT * FROM rollouts WHERE 1=1", {"run_id": run_id, "iteration": iteration,
                                                               "group_id": group_id, "purpose": purpose,
                                                               "status": status})
        return [records.rollout(r) for r in self.conn.execute(sql + " ORDER BY created_at, id", args)]

    def start_rollout(self, rollout_id: str) -> None:
        self._move_rollout(rollout_id, RolloutStatus.RUNNING, started_at=now())

    def requeue_rollout(self, rollout_id: str) -> None:
        """A crash interrupted this rollout: forget its calls and run it again."""
        with self.write() as c:
            self._check_rollout(c, rollout_id, RolloutStatus.PENDING)
            c.execute("DELETE FROM model_calls WHERE rollout_id = ?", (rollout_id,))
            c.execute("DELETE FROM samples WHERE rollout_id = ?", (rollout_id,))
            self._retire_route(c, rollout_id)  # a call still in flight must not land on the re-run
            c.execute("UPDATE rollouts SET status = ?, started_at = NULL, turns = 0 WHERE id = ?",
                      (RolloutStatus.PENDING, rollout_id))

    def redraw_rollout(self, rollout_id: str) -> None:
        """The machine failed this rollout (outcome infra_error): forget its calls and samples and draw it
        again. The one way out of `finished`, which stays final for every outcome the policy earned."""
        with self.write() as c:
            row = c.execute("SELECT status, outcome FROM rollouts WHERE id = ?", (rollout_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no rollout {rollout_id!r}")
            if (row["status"], row["outcome"]) != (RolloutStatus.FINISHED, Outcome.INFRA_ERROR):
                raise TransitionError(f"rollout {rollout_id!r} ({row['status']}, outcome {row['outcome']}) "
                                      "cannot be drawn again", "only a finished infra error is redrawn")
            c.execute("DELETE FROM model_calls WHERE rollout_id = ?", (rollout_id,))
            c.execute("DELETE FROM samples WHERE rollout_id = ?", (rollout_id,))
            self._retire_route(c, rollout_id)
            c.execute("UPDATE rollouts SET status = ?, outcome = NULL, reward = NULL, error = NULL, turns = 0, "
                      "started_at = NULL, finished_at = NULL WHERE id = ?", (RolloutStatus.PENDING, rollout_id))

    def finish_rollout(self, rollout_id: str, outcome: Outcome, reward: float, *, error: str | None = None,
                       turns: int | None = None, samples: list[Sample] | None = None) -> None:
        """Finish the rollout and, when given, write its samples in the same transaction: a crash leaves
        either a running rollout (requeued at the next start) or a finished one with its samples."""
        self._move_rollout(rollout_id, RolloutStatus.FINISHED, outcome=outcome, reward=reward, error=error,
                           turns=turns, finished_at=now(), _samples=samples)

    def _check_rollout(self, c: sqlite3.Connection, rollout_id: str, status: RolloutStatus) -> None:
        row = c.execute("SELECT status FROM rollouts WHERE id = ?", (rollout_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no rollout {rollout_id!r}")
        check_transition("rollout", ROLLOUT_TRANSITIONS, row["status"], status)

    def _move_rollout(self, rollout_id: str, status: RolloutStatus, _samples: list[Sample] | None = None,
                      **cols: Any) -> None:
        cols = {k: v for k, v in cols.items() if v is not None}
        with self.write() as c:
            self._check_rollout(c, rollout_id, status)
            sets = ", ".join(f"{k} = ?" for k in ["status", *cols])
            c.execute(f"UPDATE rollouts SET {sets} WHERE id = ?", (status, *cols.values(), rollout_id))
            if _samples:
                self._write_samples(c, _samples)

    # --- model calls ----------------------------------------------------------------------------
    def add_model_call(self, call: ModelCall) -> int:
        """Record one call; its sequence number is assigned here (in order of commit) when -1."""
        with self.write() as c:
            seq = call.seq
            if seq < 0:
                row = c.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM model_calls WHERE rollout_id = ?",
                                (call.rollout_id,)).fetchone()
                seq = row[0]
            cur = c.execute(records.insert_sql("model_calls", CALL_COLUMNS), _call_values(call, seq))
            assert cur.lastrowid is not None
            call.seq = seq
            call.id = cur.lastrowid
            return cur.lastrowid

    def model_calls(self, rollout_id: str) -> list[ModelCall]:
        rows = self.conn.execute("SELECT * FROM model_calls WHERE rollout_id = ? ORDER BY seq", (rollout_id,))
        return [records.model_call(r) for r in rows]

    # --- samples --------------------------------------------------------------------------------
    def add_samples(self, samples: list[Sample]) -> None:
        """Replace the samples of the rollouts given (idempotent rebuild)."""
        with self.write() as c:
            self._write_samples(c, samples)

    @staticmethod
    def _write_samples(c: sqlite3.Connection, samples: list[Sample]) -> None:
        for rid in {s.rollout_id for s in samples}:
            c.execute("DELETE FROM samples WHERE rollout_id = ?", (rid,))
        c.executemany(
            records.insert_sql("samples", SAMPLE_COLUMNS),
            [(s.rollout_id, s.group_id, s.branch, records.pack_ints(s.token_ids), records.pack_ints(s.mask),
              records.pack_floats(s.logprobs), s.policy_version, s.advantage, s.temperature, now())
             for s in samples],
        )

    def samples(self, rollout_id: str) -> list[Sample]:
        rows = self.conn.execute("SELECT * FROM samples WHERE rollout_id = ? ORDER BY branch", (rollout_id,))
        return [records.sample(r) for r in rows]

    # --- bulk loads (benchmarks, tests, imports): one transaction, no per-row checks --------------
    def add_rollouts(self, rollouts: Iterable[Rollout]) -> int:
        with self.write() as c:
            cur = c.executemany(records.insert_sql("rollouts", ROLLOUT_COLUMNS, "INSERT OR IGNORE"),
                                (_rollout_values(r) for r in rollouts))
            return cur.rowcount

    def add_model_calls(self, calls: Iterable[ModelCall]) -> int:
        """Calls with their `seq` set (unlike `add_model_call`, nothing is assigned here)."""
        with self.write() as c:
            cur = c.executemany(records.insert_sql("model_calls", CALL_COLUMNS),
                                (_call_values(m, m.seq) for m in calls))
            return cur.rowcount

    # --- reads for the TUI: aggregates and pages, never whole tables ------------------------------
    def rollout_counts(self, run_id: str, iteration: int) -> dict[str, int]:
        """Rollouts of one iteration (every purpose) by status and by outcome, e.g. {"running": 3, "success": 5}."""
        counts: dict[str, int] = {}
        rows = self.conn.execute("SELECT status, outcome, COUNT(*) FROM rollouts WHERE run_id = ? AND iteration = ?"
                                 " GROUP BY status, outcome", (run_id, iteration))
        for status, outcome, n in rows:
            counts[status] = counts.get(status, 0) + n
            if outcome:
                counts[outcome] = counts.get(outcome, 0) + n
        return counts

    def rollout_groups(self, run_id: str, iteration: int, *, purpose: str = "train", limit: int = 50,
                       offset: int = 0) -> list[dict[str, Any]]:
        """One page of the GRPO groups of a step with their tallies; the task is joined for the page only."""
        rows = self.conn.execute(
            "SELECT g.*, t.family, t.difficulty FROM (SELECT group_id, MIN(task_id) AS task_id, COUNT(*) AS n,"
            " SUM(status = 'running') AS running, SUM(status = 'finished') AS finished,"
            " TOTAL(outcome = 'success') AS success, TOTAL(outcome = 'infra_error') AS infra_error,"
            " AVG(reward) AS reward FROM rollouts WHERE run_id = ? AND iteration = ? AND purpose = ?"
            " GROUP BY group_id ORDER BY group_id LIMIT ? OFFSET ?) AS g LEFT JOIN tasks t ON t.id = g.task_id",
            (run_id, iteration, purpose, limit, offset))
        return [dict(r) for r in rows]

    def group_count(self, run_id: str, iteration: int, *, purpose: str = "train") -> int:
        n: int = self.scalar("SELECT COUNT(DISTINCT group_id) FROM rollouts WHERE run_id = ? AND iteration = ?"
                             " AND purpose = ?", run_id, iteration, purpose)
        return n
