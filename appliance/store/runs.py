"""Runs, their iterations, and the control requests (pause, resume, ...) that the loop answers."""

from __future__ import annotations

from typing import Any

from appliance.errors import NotFoundError
from appliance.schemas import (
    ITERATION_TRANSITIONS,
    RUN_TRANSITIONS,
    Control,
    ControlCommand,
    ControlStatus,
    Heartbeat,
    Iteration,
    IterationStatus,
    Phase,
    Run,
    RunStatus,
    check_transition,
    now,
)
from appliance.store import records
from appliance.store.db import Database


class RunRecords(Database):
    # --- runs -----------------------------------------------------------------------------------
    def create_run(self, run_id: str, config: dict[str, Any]) -> Run:
        """Idempotent: creating a run that exists returns it unchanged."""
        t = now()
        with self.write() as c:
            c.execute(
                "INSERT OR IGNORE INTO runs (id, status, config, created_at, updated_at) VALUES (?,?,?,?,?)",
                (run_id, RunStatus.RUNNING, records.to_json(config), t, t),
            )
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> Run:
        row = self.one("SELECT * FROM runs WHERE id = ?", run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id!r}", "`appliance status` lists the runs in this store")
        return records.run(row)

    def latest_run(self) -> Run | None:
        row = self.one("SELECT id FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 1")
        return self.get_run(row["id"]) if row else None

    def set_run_status(self, run_id: str, status: RunStatus) -> None:
        with self.write() as c:
            row = c.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no run {run_id!r}")
            if row["status"] != status:
                check_transition("run", RUN_TRANSITIONS, row["status"], status)
                c.execute("UPDATE runs SET status = ?, updated_at = ? WHERE id = ?", (status, now(), run_id))

    # --- iterations -----------------------------------------------------------------------------
    def start_iteration(self, run_id: str, index: int, policy_version: int) -> Iteration:
        """Idempotent on (run, index)."""
        with self.write() as c:
            c.execute(
                "INSERT OR IGNORE INTO iterations (run_id, idx, phase, status, policy_version, started_at)"
                " VALUES (?,?,?,?,?,?)",
                (run_id, index, Phase.SYNTHESIZE, IterationStatus.RUNNING, policy_version, now()),
            )
        return self.get_iteration(run_id, index)

    def get_iteration(self, run_id: str, index: int) -> Iteration:
        row = self.one("SELECT * FROM iterations WHERE run_id = ? AND idx = ?", run_id, index)
        if row is None:
            raise NotFoundError(f"run {run_id!r} has no iteration {index}")
        return records.iteration(row)

    def iterations(self, run_id: str) -> list[Iteration]:
        found = self.conn.execute("SELECT * FROM iterations WHERE run_id = ? ORDER BY idx", (run_id,))
        return [records.iteration(r) for r in found]

    def set_iteration_phase(self, run_id: str, index: int, phase: Phase) -> None:
        with self.write() as c:
            c.execute("UPDATE iterations SET phase = ? WHERE run_id = ? AND idx = ?", (phase, run_id, index))

    def set_iteration_status(self, run_id: str, index: int, status: IterationStatus, error: str | None = None) -> None:
        with self.write() as c:
            row = c.execute("SELECT status FROM iterations WHERE run_id = ? AND idx = ?", (run_id, index)).fetchone()
            if row is None:
                raise NotFoundError(f"run {run_id!r} has no iteration {index}")
            check_transition("iteration", ITERATION_TRANSITIONS, row["status"], status)
            finished = now() if status != IterationStatus.RUNNING else None
            c.execute(
                "UPDATE iterations SET status = ?, error = ?, finished_at = ? WHERE run_id = ? AND idx = ?",
                (status, error, finished, run_id, index),
            )

    # --- controls: requests from the TUI / CLI that the loop answers ------------------------------
    def request_control(self, run_id: str, command: ControlCommand) -> Control:
        with self.write() as c:
            if c.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise NotFoundError(f"no run {run_id!r}", "`appliance status` shows the runs in this store")
            cur = c.execute("INSERT INTO controls (run_id, command, status, created_at) VALUES (?,?,?,?)",
                            (run_id, ControlCommand(command), ControlStatus.PENDING, now()))
        assert cur.lastrowid is not None
        return self.get_control(cur.lastrowid)

    def get_control(self, control_id: int) -> Control:
        row = self.one("SELECT * FROM controls WHERE id = ?", control_id)
        if row is None:
            raise NotFoundError(f"no control request {control_id}")
        return records.control(row)

    def pending_controls(self, run_id: str) -> list[Control]:
        """Oldest first: the loop answers requests in the order they were made."""
        found = self.conn.execute("SELECT * FROM controls WHERE run_id = ? AND status = ? ORDER BY id",
                                  (run_id, ControlStatus.PENDING))
        return [records.control(r) for r in found]

    def ack_control(self, control_id: int, result: str, *, status: ControlStatus = ControlStatus.DONE) -> bool:
        """Answer a pending request; False when it was answered (or expired) already, so that a loop and a
        requester that gives up at the same moment cannot both win."""
        with self.write() as c:
            cur = c.execute("UPDATE controls SET status = ?, result = ?, acked_at = ? WHERE id = ? AND status = ?",
                            (ControlStatus(status), result, now(), control_id, ControlStatus.PENDING))
            return cur.rowcount == 1

    def controls(self, run_id: str, *, limit: int = 20) -> list[Control]:
        """Newest first: the history the TUI's controls screen shows."""
        found = self.conn.execute("SELECT * FROM controls WHERE run_id = ? ORDER BY id DESC LIMIT ?", (run_id, limit))
        return [records.control(r) for r in found]

    def expire_pending_controls(self, run_id: str, result: str) -> int:
        """Withdraw the run's pending requests (a live loop starting: they were made while none answered, and
        acting on them now would be acting late); returns how many."""
        with self.write() as c:
            cur = c.execute("UPDATE controls SET status = ?, result = ?, acked_at = ? WHERE run_id = ? AND status = ?",
                            (ControlStatus.EXPIRED, result, now(), run_id, ControlStatus.PENDING))
            return cur.rowcount

    # --- the live loop's heartbeat ----------------------------------------------------------------
    def beat(self, run_id: str, pid: int, started_at: float, progress: dict[str, Any] | None) -> None:
        with self.write() as c:
            c.execute("INSERT OR REPLACE INTO heartbeat (id, run_id, pid, started_at, beat_at, progress) "
                      "VALUES (1,?,?,?,?,?)", (run_id, pid, started_at, now(), records.to_json(progress)))

    def heartbeat(self) -> Heartbeat | None:
        row = self.one("SELECT * FROM heartbeat WHERE id = 1")
        if row is None:
            return None
        progress = records.from_json(row["progress"]) if row["progress"] else None
        return Heartbeat(row["run_id"], row["pid"], row["started_at"], row["beat_at"], progress)

    def end_heartbeat(self, pid: int) -> None:
        """The loop in process `pid` ended: no loop answers any more (another's beat is left alone)."""
        with self.write() as c:
            c.execute("DELETE FROM heartbeat WHERE pid = ?", (pid,))
