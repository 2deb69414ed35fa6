"""The task pool: tasks and their validations, the training pool (never a held-out task), and its pages."""

from __future__ import annotations

from typing import Any

from appliance.errors import NotFoundError, StoreError
from appliance.schemas import TASK_TRANSITIONS, Split, Task, TaskStatus, check_transition, now
from appliance.store import records
from appliance.store.db import Database, where

TASK_COLUMNS = records.columns(Task)


class TaskPool(Database):
    def add_task(self, task: Task) -> bool:
        """Insert a task; False when a task with this id exists already (idempotent)."""
        with self.write() as c:
            cur = c.execute(
                records.insert_sql("tasks", TASK_COLUMNS, "INSERT OR IGNORE"),
                (task.id, task.run_id, task.family, task.difficulty, task.source, task.split, task.status,
                 records.to_json(task.spec), task.reject_reason, task.pass_rate, task.created_at, task.iteration),
            )
            return cur.rowcount == 1

    def get_task(self, task_id: str) -> Task:
        row = self.one("SELECT * FROM tasks WHERE id = ?", task_id)
        if row is None:
            raise NotFoundError(f"no task {task_id!r}", "`appliance tasks list` shows the pool")
        return records.task(row)

    def tasks(self, run_id: str | None = None, *, split: Split | None = None,
              status: TaskStatus | None = None, family: str | None = None,
              iteration: int | None = None) -> list[Task]:
        sql, args = where("SELECT * FROM tasks WHERE 1=1", {"run_id": run_id, "split": split, "status": status,
                                                             "family": family, "iteration": iteration})
        return [records.task(r) for r in self.conn.execute(sql + " ORDER BY created_at, id", args)]

    def set_task_status(self, task_id: str, status: TaskStatus, *, reason: str | None = None,
                        pass_rate: float | None = None) -> None:
        with self.write() as c:
            row = c.execute("SELECT status FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no task {task_id!r}")
            check_transition("task", TASK_TRANSITIONS, row["status"], status)
            c.execute(
                "UPDATE tasks SET status = ?, reject_reason = COALESCE(?, reject_reason),"
                " pass_rate = COALESCE(?, pass_rate) WHERE id = ?",
                (status, reason, pass_rate, task_id),
            )

    def add_validation(self, task_id: str, stage: str, passed: bool, reason: str | None = None,
                       details: dict[str, Any] | None = None) -> None:
        with self.write() as c:
            c.execute(
                "INSERT INTO validations (task_id, stage, passed, reason, details, created_at) VALUES (?,?,?,?,?,?)",
                (task_id, stage, int(passed), reason, records.to_json(details), now()),
            )

    def training_tasks(self, run_id: str | None = None, *, status: TaskStatus | None = None,
                       family: str | None = None) -> list[Task]:
        """The training pool: split=train only, whatever else is asked for."""
        return self.tasks(run_id, split=Split.TRAIN, status=status, family=family)

    def check_trainable(self, task_ids: list[str] | set[str]) -> None:
        """Raise `StoreError` if any of these tasks is held out or in the dev set; the trainer calls this
        before a step."""
        ids = sorted(set(task_ids))
        held: list[str] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = self.conn.execute("SELECT id FROM tasks WHERE split IN ('heldout', 'dev')"
                                     f" AND id IN ({','.join('?' * len(chunk))})", chunk)
            held += [r[0] for r in rows]
        if held:
            raise StoreError(f"{len(held)} held-out or dev task(s) asked for in a training context: "
                             f"{', '.join(held[:5])}",
                             "held-out and dev tasks are for evaluation only; take training tasks from "
                             "store.training_tasks()")

    # --- reads for the TUI: aggregates and pages, never whole tables ------------------------------
    def task_matrix(self, run_id: str | None) -> list[tuple[str, int, str, str, int]]:
        """(family, difficulty, split, status, count) over the task pool."""
        rows = self.conn.execute("SELECT family, difficulty, split, status, COUNT(*) FROM tasks WHERE run_id IS ?"
                                 " GROUP BY family, difficulty, split, status ORDER BY family, difficulty",
                                 (run_id,))
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def tasks_page(self, run_id: str | None, family: str, difficulty: int, *, limit: int = 50,
                   offset: int = 0) -> list[Task]:
        rows = self.conn.execute("SELECT * FROM tasks WHERE run_id IS ? AND family = ? AND difficulty = ?"
                                 " ORDER BY created_at, id LIMIT ? OFFSET ?",
                                 (run_id, family, difficulty, limit, offset))
        return [records.task(r) for r in rows]
