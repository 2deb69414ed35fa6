"""The appliance's memory: one SQLite file (WAL) and the only module that writes SQL.

Every state change is a committed row before the next step starts, so a crash loses nothing. Writes run
in `BEGIN IMMEDIATE` transactions (taking the write lock up front, so WAL readers never have to upgrade and
fail with "database is locked") with a generous busy timeout; each thread gets its own connection.
Token ids and logprobs are stored as packed arrays (int32 / float32 blobs): exact, and ~4x smaller than
JSON at a million model calls.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils
from sqlite_migrate import Migrations

from appliance.errors import NotFoundError, StoreError
from appliance.schemas import (
    ENGINE_TRANSITIONS,
    ITERATION_TRANSITIONS,
    ROLLOUT_TRANSITIONS,
    RUN_TRANSITIONS,
    TASK_TRANSITIONS,
    Checkpoint,
    Control,
    ControlCommand,
    ControlStatus,
    Demonstration,
    EngineState,
    Event,
    Iteration,
    IterationStatus,
    ModelCall,
    Outcome,
    Phase,
    Rollout,
    RolloutStatus,
    Run,
    RunStatus,
    Sample,
    Split,
    Task,
    TaskStatus,
    check_transition,
    now,
)

BUSY_TIMEOUT_MS = 30_000

migrations = Migrations("appliance")


@migrations()
def m001_core(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, status TEXT NOT NULL, config TEXT NOT NULL,
            created_at REAL NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE iterations (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), idx INTEGER NOT NULL,
            phase TEXT NOT NULL, status TEXT NOT NULL, policy_version INTEGER NOT NULL,
            started_at REAL NOT NULL, finished_at REAL, error TEXT, UNIQUE (run_id, idx));
        CREATE TABLE tasks (
            id TEXT PRIMARY KEY, run_id TEXT, family TEXT NOT NULL, difficulty INTEGER NOT NULL,
            source TEXT NOT NULL, split TEXT NOT NULL, status TEXT NOT NULL, spec TEXT NOT NULL,
            reject_reason TEXT, pass_rate REAL, created_at REAL NOT NULL);
        CREATE INDEX tasks_pool ON tasks (run_id, split, status, family, difficulty);
        CREATE TABLE validations (
            id INTEGER PRIMARY KEY, task_id TEXT NOT NULL REFERENCES tasks(id), stage TEXT NOT NULL,
            passed INTEGER NOT NULL, reason TEXT, details TEXT, created_at REAL NOT NULL);
        CREATE TABLE rollouts (
            id TEXT PRIMARY KEY, run_id TEXT, task_id TEXT, group_id TEXT, iteration INTEGER,
            harness TEXT NOT NULL, policy_version INTEGER NOT NULL, status TEXT NOT NULL,
            purpose TEXT NOT NULL, outcome TEXT, reward REAL, error TEXT, turns INTEGER NOT NULL DEFAULT 0,
            started_at REAL, finished_at REAL, created_at REAL NOT NULL);
        CREATE INDEX rollouts_by_run ON rollouts (run_id, iteration, purpose, status);
        CREATE INDEX rollouts_by_group ON rollouts (group_id);
        CREATE TABLE model_calls (
            id INTEGER PRIMARY KEY, rollout_id TEXT NOT NULL, seq INTEGER NOT NULL, status TEXT NOT NULL,
            request TEXT NOT NULL, response TEXT, prompt_ids BLOB NOT NULL, completion_ids BLOB NOT NULL,
            logprobs BLOB NOT NULL, policy_version INTEGER NOT NULL, latency_s REAL NOT NULL, error TEXT,
            created_at REAL NOT NULL, UNIQUE (rollout_id, seq));
        CREATE TABLE samples (
            id INTEGER PRIMARY KEY, rollout_id TEXT NOT NULL, group_id TEXT, branch INTEGER NOT NULL,
            token_ids BLOB NOT NULL, mask BLOB NOT NULL, logprobs BLOB NOT NULL, reward REAL NOT NULL,
            advantage REAL, policy_version INTEGER NOT NULL, created_at REAL NOT NULL,
            UNIQUE (rollout_id, branch));
        CREATE TABLE checkpoints (
            id INTEGER PRIMARY KEY, run_id TEXT, policy_version INTEGER NOT NULL, iteration INTEGER,
            kind TEXT NOT NULL, path TEXT NOT NULL, metrics TEXT, created_at REAL NOT NULL);
        CREATE TABLE evals (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, iteration INTEGER NOT NULL,
            policy_version INTEGER NOT NULL, family TEXT NOT NULL, difficulty INTEGER NOT NULL,
            n INTEGER NOT NULL, passed INTEGER NOT NULL, created_at REAL NOT NULL,
            UNIQUE (run_id, iteration, family, difficulty));
        CREATE TABLE reports (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, iteration INTEGER NOT NULL, json TEXT NOT NULL,
            markdown TEXT NOT NULL, created_at REAL NOT NULL, UNIQUE (run_id, iteration));
        CREATE TABLE events (
            id INTEGER PRIMARY KEY, run_id TEXT, kind TEXT NOT NULL, message TEXT NOT NULL, data TEXT,
            duration_s REAL, created_at REAL NOT NULL);
        CREATE INDEX events_by_run ON events (run_id, id);
        CREATE TABLE metrics (
            id INTEGER PRIMARY KEY, run_id TEXT, step INTEGER NOT NULL, name TEXT NOT NULL,
            value REAL NOT NULL, created_at REAL NOT NULL);
        CREATE INDEX metrics_by_name ON metrics (run_id, name, step);
        """
    )


@migrations()
def m002_engine_and_routes(db: sqlite_utils.Database) -> None:
    # The engine's state machine and policy version survive restarts; a rollout's proxy route is stored
    # as a hash of its secret token (a leaked store file does not hand out live routes).
    db.executescript(
        """
        CREATE TABLE engine (
            id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL, policy_version INTEGER NOT NULL,
            weights TEXT, error TEXT, updated_at REAL NOT NULL);
        INSERT INTO engine (id, state, policy_version, updated_at) VALUES (1, 'stopped', 0, 0);
        ALTER TABLE rollouts ADD COLUMN route_hash TEXT;
        CREATE UNIQUE INDEX rollouts_by_route ON rollouts (route_hash);
        """
    )


@migrations()
def m003_controls_and_tui_reads(db: sqlite_utils.Database) -> None:
    # controls: the channel from the TUI / CLI to the loop. The requester inserts a pending row; the loop
    # answers it (done / refused) at its next safe point; a requester that gave up marks it expired.
    # The indexes serve the TUI's screens: per-step rollout counts and group pages straight from the
    # index (no table reads at 100k rollouts) and the phase timeline without scanning every event.
    db.executescript(
        """
        CREATE TABLE controls (
            id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, command TEXT NOT NULL, status TEXT NOT NULL,
            result TEXT, created_at REAL NOT NULL, acked_at REAL);
        CREATE INDEX controls_by_run ON controls (run_id, status, id);
        CREATE INDEX rollouts_by_step ON rollouts (run_id, iteration, purpose, group_id, status, outcome, reward,
                                                  task_id);
        CREATE INDEX events_by_kind ON events (run_id, kind, id);
        """
    )


@migrations()
def m004_heldout_guard(db: sqlite_utils.Database) -> None:
    # The held-out set is never trained on: a training rollout of a held-out task is refused by the
    # database itself (a backstop behind Store.check_trainable), and a held-out task stays held out.
    db.executescript(
        """
        CREATE TRIGGER heldout_not_trained BEFORE INSERT ON rollouts
        WHEN NEW.purpose = 'train' AND NEW.task_id IN (SELECT id FROM tasks WHERE split = 'heldout')
        BEGIN SELECT RAISE(ABORT, 'held-out task used in a training rollout'); END;
        CREATE TRIGGER heldout_split_fixed BEFORE UPDATE OF split ON tasks
        WHEN OLD.split = 'heldout' AND NEW.split != 'heldout'
        BEGIN SELECT RAISE(ABORT, 'a held-out task cannot move to training'); END;
        """
    )


@migrations()
def m005_sampling_temperature(db: sqlite_utils.Database) -> None:
    # The temperature each call was sampled at (the engine serves logprobs after temperature scaling, the
    # trainer divides its logits by the same value); a sample carries its calls' temperature.
    db.executescript(
        """
        ALTER TABLE model_calls ADD COLUMN temperature REAL;
        ALTER TABLE samples ADD COLUMN temperature REAL NOT NULL DEFAULT 1.0;
        """
    )


@migrations()
def m006_lineage(db: sqlite_utils.Database) -> None:
    # The model's identity. A lineage is one base model (its content hash is the identity; the path is
    # where it was seen) and the policy versions trained from it: version 0 is the base, every later
    # version names its parent, its weights and the run and iteration that made it. The engine row, each
    # run and each checkpoint carry the lineage they belong to (filled from the engine row on insert), so
    # after `appliance model use` the old lineage's history stays and is never mixed with the new one.
    db.executescript(
        """
        CREATE TABLE lineages (
            id INTEGER PRIMARY KEY, base_path TEXT NOT NULL, base_name TEXT NOT NULL, model_type TEXT,
            parameters INTEGER, content_hash TEXT NOT NULL, files TEXT NOT NULL, reason TEXT NOT NULL,
            created_at REAL NOT NULL);
        CREATE TABLE policy_versions (
            lineage_id INTEGER NOT NULL REFERENCES lineages(id), version INTEGER NOT NULL,
            parent_version INTEGER, kind TEXT NOT NULL, weights TEXT NOT NULL, created_at REAL NOT NULL,
            PRIMARY KEY (lineage_id, version));
        ALTER TABLE engine ADD COLUMN lineage_id INTEGER;
        ALTER TABLE runs ADD COLUMN lineage_id INTEGER;
        ALTER TABLE checkpoints ADD COLUMN lineage_id INTEGER;
        CREATE TRIGGER runs_lineage AFTER INSERT ON runs WHEN NEW.lineage_id IS NULL
        BEGIN UPDATE runs SET lineage_id = (SELECT lineage_id FROM engine WHERE id = 1) WHERE id = NEW.id; END;
        CREATE TRIGGER checkpoints_lineage AFTER INSERT ON checkpoints WHEN NEW.lineage_id IS NULL
        BEGIN UPDATE checkpoints SET lineage_id = (SELECT lineage_id FROM engine WHERE id = 1) WHERE id = NEW.id; END;
        """
    )


@migrations()
def m007_demonstrations(db: sqlite_utils.Database) -> None:
    # Demonstrations: verified conversations tokenized for SFT (appliance.demonstrations). A table of
    # their own, not rows in `samples`: samples are exact engine tokens keyed by rollout and feed GRPO;
    # demonstrations are re-tokenized text and only ever feed SFT. Never of a held-out task.
    db.executescript(
        """
        CREATE TABLE demonstrations (
            id INTEGER PRIMARY KEY, run_id TEXT, task_id TEXT, family TEXT NOT NULL, difficulty INTEGER NOT NULL,
            origin TEXT NOT NULL, iteration INTEGER, digest TEXT NOT NULL, messages TEXT NOT NULL,
            token_ids BLOB NOT NULL, mask BLOB NOT NULL, created_at REAL NOT NULL, UNIQUE (run_id, digest));
        CREATE INDEX demonstrations_by_run ON demonstrations (run_id, difficulty, family);
        CREATE TRIGGER heldout_not_demonstrated BEFORE INSERT ON demonstrations
        WHEN NEW.task_id IN (SELECT id FROM tasks WHERE split = 'heldout')
        BEGIN SELECT RAISE(ABORT, 'held-out task used in a demonstration'); END;
        """
    )


def pack_ints(values: list[int]) -> bytes:
    return array("i", values).tobytes()


def unpack_ints(blob: bytes) -> list[int]:
    a = array("i")
    a.frombytes(blob)
    return a.tolist()


def pack_floats(values: list[float]) -> bytes:
    return array("f", values).tobytes()


def unpack_floats(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    return a.tolist()


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


class Store:
    """Typed reads and writes over the appliance's SQLite file; safe to share between threads."""

    def __init__(self, path: Path | str, *, migrate: bool = True) -> None:
        self.path = Path(path)
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self.conn
            conn.execute("PRAGMA journal_mode=WAL")
        except (OSError, sqlite3.Error) as e:
            raise StoreError(
                f"cannot open the store at {self.path}: {e}",
                "check that APPLIANCE_HOME points to a writable directory",
            ) from e
        if migrate:
            self.migrate()

    # --- connections and transactions ---------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction; the write lock is taken at BEGIN, not at the first write."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def migrate(self, stop_before: str | None = None) -> list[str]:
        """Apply pending migrations in order; returns the names applied."""
        db = sqlite_utils.Database(self.conn)
        known = {m.name for m in migrations.pending(sqlite_utils.Database(memory=True))}
        foreign = [m.name for m in migrations.applied(db) if m.name not in known]
        if foreign:
            # A store migrated by another build (a newer release, or a development branch whose migrations
            # were later renumbered): applying ours over it would fail half-way or silently skew the schema.
            raise StoreError(
                f"the store at {self.path} was written by a different build of the appliance: it records "
                f"migrations this build does not know ({', '.join(foreign)})",
                f"run the build that wrote it, or move the store aside (mv {self.path} {self.path}.other) "
                "or set APPLIANCE_HOME to another directory to start a fresh one",
            )
        pending = [m.name for m in migrations.pending(db)]
        if stop_before is not None and stop_before in pending:
            pending = pending[: pending.index(stop_before)]
        try:
            migrations.apply(db, stop_before=stop_before)
        except sqlite3.Error as e:
            # Each migration and its record commit together, so the store is left at the last good one.
            raise StoreError(f"cannot bring the store at {self.path} up to date: {e}",
                             "restore it from a backup (`appliance backup` writes one) or move it aside") from e
        return pending

    def backup(self, dest: Path | str) -> Path:
        """A consistent copy of the store while the appliance runs (SQLite's online backup, WAL included).

        Written next to `dest` first and renamed, so an interrupted backup never leaves a torn file there.
        """
        dest = Path(dest)
        if dest.resolve() == self.path.resolve():
            raise StoreError(f"refusing to back up the store onto itself ({dest})", "give another file name")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(dest.name + ".partial")
            partial.unlink(missing_ok=True)
            target = sqlite3.connect(partial)
            try:
                self.conn.backup(target, pages=4096)
            finally:
                target.close()
            partial.replace(dest)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot back up the store to {dest}: {e}",
                             "check that the destination directory exists and is writable") from e
        return dest

    def applied_migrations(self) -> list[str]:
        return [m.name for m in migrations.applied(sqlite_utils.Database(self.conn))]

    def _one(self, sql: str, *args: Any) -> sqlite3.Row | None:
        return self.conn.execute(sql, args).fetchone()

    # --- runs -----------------------------------------------------------------------------------
    def create_run(self, run_id: str, config: dict[str, Any]) -> Run:
        """Idempotent: creating a run that exists returns it unchanged."""
        t = now()
        with self.write() as c:
            c.execute(
                "INSERT OR IGNORE INTO runs (id, status, config, created_at, updated_at) VALUES (?,?,?,?,?)",
                (run_id, RunStatus.RUNNING, _json(config), t, t),
            )
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> Run:
        row = self._one("SELECT * FROM runs WHERE id = ?", run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id!r}", "`appliance status` lists the runs in this store")
        return Run(row["id"], RunStatus(row["status"]), json.loads(row["config"]), row["created_at"], row["updated_at"])

    def latest_run(self) -> Run | None:
        row = self._one("SELECT id FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 1")
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
        row = self._one("SELECT * FROM iterations WHERE run_id = ? AND idx = ?", run_id, index)
        if row is None:
            raise NotFoundError(f"run {run_id!r} has no iteration {index}")
        return _iteration(row)

    def iterations(self, run_id: str) -> list[Iteration]:
        rows = self.conn.execute("SELECT * FROM iterations WHERE run_id = ? ORDER BY idx", (run_id,))
        return [_iteration(r) for r in rows]

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

    # --- tasks ----------------------------------------------------------------------------------
    def add_task(self, task: Task) -> bool:
        """Insert a task; False when a task with this id exists already (idempotent)."""
        with self.write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO tasks (id, run_id, family, difficulty, source, split, status, spec,"
                " reject_reason, pass_rate, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (task.id, task.run_id, task.family, task.difficulty, task.source, task.split, task.status,
                 _json(task.spec), task.reject_reason, task.pass_rate, task.created_at),
            )
            return cur.rowcount == 1

    def get_task(self, task_id: str) -> Task:
        row = self._one("SELECT * FROM tasks WHERE id = ?", task_id)
        if row is None:
            raise NotFoundError(f"no task {task_id!r}", "`appliance tasks list` shows the pool")
        return _task(row)

    def tasks(self, run_id: str | None = None, *, split: Split | None = None,
              status: TaskStatus | None = None, family: str | None = None) -> list[Task]:
        sql, args = "SELECT * FROM tasks WHERE 1=1", []
        for col, val in (("run_id", run_id), ("split", split), ("status", status), ("family", family)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        return [_task(r) for r in self.conn.execute(sql + " ORDER BY created_at, id", args)]

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
                (task_id, stage, int(passed), reason, _json(details), now()),
            )

    def training_tasks(self, run_id: str | None = None, *, status: TaskStatus | None = None,
                       family: str | None = None) -> list[Task]:
        """The training pool: split=train only, whatever else is asked for."""
        return self.tasks(run_id, split=Split.TRAIN, status=status, family=family)

    def check_trainable(self, task_ids: list[str] | set[str]) -> None:
        """Raise `StoreError` if any of these tasks is held out; the trainer calls this before a step."""
        ids = sorted(set(task_ids))
        held: list[str] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = self.conn.execute(f"SELECT id FROM tasks WHERE split = 'heldout' AND id IN ({','.join('?' * len(chunk))})",
                                     chunk)
            held += [r[0] for r in rows]
        if held:
            raise StoreError(f"{len(held)} held-out task(s) asked for in a training context: {', '.join(held[:5])}",
                             "held-out tasks are for evaluation only; take training tasks from store.training_tasks()")

    # --- rollouts -------------------------------------------------------------------------------
    def add_rollout(self, rollout: Rollout, route_hash: str | None = None) -> bool:
        with self.write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO rollouts (id, run_id, task_id, group_id, iteration, harness,"
                " policy_version, status, purpose, outcome, reward, error, turns, started_at, finished_at,"
                " created_at, route_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (rollout.id, rollout.run_id, rollout.task_id, rollout.group_id, rollout.iteration,
                 rollout.harness, rollout.policy_version, rollout.status, rollout.purpose, rollout.outcome,
                 rollout.reward, rollout.error, rollout.turns, rollout.started_at, rollout.finished_at,
                 rollout.created_at, route_hash),
            )
            return cur.rowcount == 1

    def get_rollout(self, rollout_id: str) -> Rollout:
        row = self._one("SELECT * FROM rollouts WHERE id = ?", rollout_id)
        if row is None:
            raise NotFoundError(f"no rollout {rollout_id!r}")
        return _rollout(row)

    def rollout_by_route(self, route_hash: str) -> Rollout | None:
        row = self._one("SELECT * FROM rollouts WHERE route_hash = ?", route_hash)
        return _rollout(row) if row else None

    def set_rollout_route(self, rollout_id: str, route_hash: str) -> None:
        """Give a rollout its proxy route (the hash of its secret token); replaces an earlier one."""
        with self.write() as c:
            cur = c.execute("UPDATE rollouts SET route_hash = ? WHERE id = ?", (route_hash, rollout_id))
            if cur.rowcount == 0:
                raise NotFoundError(f"no rollout {rollout_id!r}", "add the rollout before registering its route")

    def rollouts(self, run_id: str | None = None, *, iteration: int | None = None, group_id: str | None = None,
                 purpose: str | None = None, status: RolloutStatus | None = None) -> list[Rollout]:
        sql, args = "SELECT * FROM rollouts WHERE 1=1", []
        for col, val in (("run_id", run_id), ("iteration", iteration), ("group_id", group_id),
                         ("purpose", purpose), ("status", status)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        return [_rollout(r) for r in self.conn.execute(sql + " ORDER BY created_at, id", args)]

    def start_rollout(self, rollout_id: str) -> None:
        self._move_rollout(rollout_id, RolloutStatus.RUNNING, started_at=now())

    def requeue_rollout(self, rollout_id: str) -> None:
        """A crash interrupted this rollout: forget its calls and run it again."""
        with self.write() as c:
            self._check_rollout(c, rollout_id, RolloutStatus.PENDING)
            c.execute("DELETE FROM model_calls WHERE rollout_id = ?", (rollout_id,))
            c.execute("DELETE FROM samples WHERE rollout_id = ?", (rollout_id,))
            c.execute("UPDATE rollouts SET status = ?, started_at = NULL, turns = 0 WHERE id = ?",
                      (RolloutStatus.PENDING, rollout_id))

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
            cur = c.execute(
                "INSERT INTO model_calls (rollout_id, seq, status, request, response, prompt_ids, completion_ids,"
                " logprobs, policy_version, latency_s, error, created_at, temperature)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (call.rollout_id, seq, call.status, _json(call.request), _json(call.response),
                 pack_ints(call.prompt_ids), pack_ints(call.completion_ids), pack_floats(call.logprobs),
                 call.policy_version, call.latency_s, call.error, call.created_at, call.temperature),
            )
            call.seq = seq
            call.id = cur.lastrowid
            return cur.lastrowid

    def model_calls(self, rollout_id: str) -> list[ModelCall]:
        rows = self.conn.execute("SELECT * FROM model_calls WHERE rollout_id = ? ORDER BY seq", (rollout_id,))
        return [_model_call(r) for r in rows]

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
            "INSERT INTO samples (rollout_id, group_id, branch, token_ids, mask, logprobs, reward, advantage,"
            " policy_version, created_at, temperature) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [(s.rollout_id, s.group_id, s.branch, pack_ints(s.token_ids), pack_ints(s.mask),
              pack_floats(s.logprobs), s.reward, s.advantage, s.policy_version, now(), s.temperature)
             for s in samples],
        )

    def samples(self, rollout_id: str) -> list[Sample]:
        rows = self.conn.execute("SELECT * FROM samples WHERE rollout_id = ? ORDER BY branch", (rollout_id,))
        return [Sample(r["rollout_id"], r["group_id"], r["branch"], unpack_ints(r["token_ids"]),
                       unpack_ints(r["mask"]), unpack_floats(r["logprobs"]), r["reward"], r["policy_version"],
                       r["advantage"], r["temperature"]) for r in rows]

    # --- engine ---------------------------------------------------------------------------------
    def engine_state(self) -> tuple[EngineState, int, str | None]:
        row = self._one("SELECT state, policy_version, weights FROM engine WHERE id = 1")
        return EngineState(row["state"]), row["policy_version"], row["weights"]

    def set_engine_state(self, state: EngineState, *, policy_version: int | None = None,
                         weights: str | None = None, error: str | None = None, force: bool = False) -> None:
        """Move the engine's state machine; `force` is for start-up, where the stored state is stale."""
        with self.write() as c:
            row = c.execute("SELECT state FROM engine WHERE id = 1").fetchone()
            if not force and row["state"] != state:
                check_transition("engine", ENGINE_TRANSITIONS, row["state"], state)
            c.execute(
                "UPDATE engine SET state = ?, policy_version = COALESCE(?, policy_version),"
                " weights = COALESCE(?, weights), error = ?, updated_at = ? WHERE id = 1",
                (state, policy_version, weights, error, now()),
            )
            c.execute("INSERT INTO events (run_id, kind, message, data, created_at) VALUES (?,?,?,?,?)",
                      (None, "engine", state, _json({"policy_version": policy_version, "error": error}), now()))

    # --- events and metrics ---------------------------------------------------------------------
    def add_event(self, event: Event) -> int:
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO events (run_id, kind, message, data, duration_s, created_at) VALUES (?,?,?,?,?,?)",
                (event.run_id, event.kind, event.message, _json(event.data), event.duration_s, event.created_at),
            )
            return cur.lastrowid

    def events(self, run_id: str | None = None, *, after_id: int = 0, kind: str | None = None,
               limit: int = 1000) -> list[Event]:
        sql, args = "SELECT * FROM events WHERE id > ?", [after_id]
        if run_id is not None:
            sql += " AND (run_id = ? OR run_id IS NULL)"
            args.append(run_id)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        rows = self.conn.execute(sql + " ORDER BY id LIMIT ?", (*args, limit))
        return [Event(r["kind"], r["message"], r["run_id"], json.loads(r["data"] or "{}"), r["duration_s"],
                      r["created_at"], r["id"]) for r in rows]

    def add_metrics(self, run_id: str | None, step: int, values: dict[str, float]) -> None:
        t = now()
        with self.write() as c:
            c.executemany("INSERT INTO metrics (run_id, step, name, value, created_at) VALUES (?,?,?,?,?)",
                          [(run_id, step, k, float(v), t) for k, v in values.items()])

    def metric_series(self, run_id: str | None, name: str) -> list[tuple[int, float]]:
        rows = self.conn.execute(
            "SELECT step, value FROM metrics WHERE run_id IS ? AND name = ? ORDER BY step, id", (run_id, name))
        return [(r[0], r[1]) for r in rows]

    # --- checkpoints ----------------------------------------------------------------------------
    def add_checkpoint(self, ckpt: Checkpoint) -> int:
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO checkpoints (run_id, policy_version, iteration, kind, path, metrics, created_at)"
                " VALUES (?,?,?,?,?,?,?)",
                (ckpt.run_id, ckpt.policy_version, ckpt.iteration, ckpt.kind, ckpt.path, _json(ckpt.metrics),
                 ckpt.created_at),
            )
            ckpt.id = cur.lastrowid
            return cur.lastrowid

    def checkpoints(self, run_id: str | None = None) -> list[Checkpoint]:
        """Oldest first; all runs when `run_id` is None."""
        sql, args = "SELECT * FROM checkpoints", []
        if run_id is not None:
            sql, args = sql + " WHERE run_id = ?", [run_id]
        return [_checkpoint(r) for r in self.conn.execute(sql + " ORDER BY policy_version, id", args)]

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
        sql, args = "SELECT * FROM evals WHERE run_id = ?", [run_id]
        if iteration is not None:
            sql += " AND iteration = ?"
            args.append(iteration)
        rows = self.conn.execute(sql + " ORDER BY iteration, family, difficulty", args)
        return [{k: r[k] for k in ("iteration", "policy_version", "family", "difficulty", "n", "passed")} for r in rows]

    def save_report(self, run_id: str, iteration: int, report: dict[str, Any], markdown: str) -> None:
        with self.write() as c:
            c.execute(
                "INSERT INTO reports (run_id, iteration, json, markdown, created_at) VALUES (?,?,?,?,?)"
                " ON CONFLICT (run_id, iteration) DO UPDATE SET json = excluded.json, markdown = excluded.markdown",
                (run_id, iteration, _json(report), markdown, now()),
            )

    def report(self, run_id: str, iteration: int | None = None) -> tuple[dict[str, Any], str] | None:
        """The report of one iteration, or the latest one when `iteration` is None."""
        if iteration is None:
            row = self._one("SELECT json, markdown FROM reports WHERE run_id = ? ORDER BY iteration DESC LIMIT 1", run_id)
        else:
            row = self._one("SELECT json, markdown FROM reports WHERE run_id = ? AND iteration = ?", run_id, iteration)
        return (json.loads(row["json"]), row["markdown"]) if row else None

    # --- controls: requests from the TUI / CLI that the loop answers ------------------------------
    def request_control(self, run_id: str, command: ControlCommand) -> Control:
        with self.write() as c:
            if c.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise NotFoundError(f"no run {run_id!r}", "`appliance status` shows the runs in this store")
            cur = c.execute("INSERT INTO controls (run_id, command, status, created_at) VALUES (?,?,?,?)",
                            (run_id, ControlCommand(command), ControlStatus.PENDING, now()))
        return self.get_control(cur.lastrowid)

    def get_control(self, control_id: int) -> Control:
        row = self._one("SELECT * FROM controls WHERE id = ?", control_id)
        if row is None:
            raise NotFoundError(f"no control request {control_id}")
        return _control(row)

    def pending_controls(self, run_id: str) -> list[Control]:
        """Oldest first: the loop answers requests in the order they were made."""
        rows = self.conn.execute("SELECT * FROM controls WHERE run_id = ? AND status = ? ORDER BY id",
                                 (run_id, ControlStatus.PENDING))
        return [_control(r) for r in rows]

    def ack_control(self, control_id: int, result: str, *, status: ControlStatus = ControlStatus.DONE) -> bool:
        """Answer a pending request; False when it was answered (or expired) already, so that a loop and a
        requester that gives up at the same moment cannot both win."""
        with self.write() as c:
            cur = c.execute("UPDATE controls SET status = ?, result = ?, acked_at = ? WHERE id = ? AND status = ?",
                            (ControlStatus(status), result, now(), control_id, ControlStatus.PENDING))
            return cur.rowcount == 1

    def controls(self, run_id: str, *, limit: int = 20) -> list[Control]:
        """Newest first: the history the TUI's controls screen shows."""
        rows = self.conn.execute("SELECT * FROM controls WHERE run_id = ? ORDER BY id DESC LIMIT ?", (run_id, limit))
        return [_control(r) for r in rows]

    # --- bulk loads (benchmarks, tests, imports): one transaction, no per-row checks --------------
    def add_rollouts(self, rollouts: Iterable[Rollout]) -> int:
        with self.write() as c:
            cur = c.executemany(
                "INSERT OR IGNORE INTO rollouts (id, run_id, task_id, group_id, iteration, harness, policy_version,"
                " status, purpose, outcome, reward, error, turns, started_at, finished_at, created_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                ((r.id, r.run_id, r.task_id, r.group_id, r.iteration, r.harness, r.policy_version, r.status,
                  r.purpose, r.outcome, r.reward, r.error, r.turns, r.started_at, r.finished_at, r.created_at)
                 for r in rollouts),
            )
            return cur.rowcount

    def add_model_calls(self, calls: Iterable[ModelCall]) -> int:
        """Calls with their `seq` set (unlike `add_model_call`, nothing is assigned here)."""
        with self.write() as c:
            cur = c.executemany(
                "INSERT INTO model_calls (rollout_id, seq, status, request, response, prompt_ids, completion_ids,"
                " logprobs, policy_version, latency_s, error, created_at, temperature)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                ((m.rollout_id, m.seq, m.status, _json(m.request), _json(m.response), pack_ints(m.prompt_ids),
                  pack_ints(m.completion_ids), pack_floats(m.logprobs), m.policy_version, m.latency_s, m.error,
                  m.created_at, m.temperature) for m in calls),
            )
            return cur.rowcount

    # --- reads for the TUI: aggregates and pages, never whole tables ------------------------------
    def phase_events(self, run_id: str, iteration: int) -> list[Event]:
        """The `phase` events of one iteration (data.iteration), oldest first: the phase timeline."""
        rows = self.conn.execute(
            "SELECT * FROM events WHERE run_id = ? AND kind = 'phase' AND json_extract(data, '$.iteration') = ?"
            " ORDER BY id", (run_id, iteration))
        return [_event(r) for r in rows]

    def latest_events(self, run_id: str | None, *, limit: int = 20, kinds: tuple[str, ...] = ()) -> list[Event]:
        """The newest events of a run (and run-less ones such as engine moves), newest first. One indexed
        query per (run, kind): a single OR/IN query would sort every matching event of a long run."""
        kinds = kinds or tuple(r[0] for r in self.conn.execute("SELECT DISTINCT kind FROM events"))
        found: list[Event] = []
        for owner in {run_id, None}:
            for kind in kinds:
                rows = self.conn.execute("SELECT * FROM events WHERE run_id IS ? AND kind = ? ORDER BY id DESC LIMIT ?",
                                         (owner, kind, limit))
                found.extend(_event(r) for r in rows)
        return sorted(found, key=lambda e: e.id, reverse=True)[:limit]

    def metric_tail(self, run_id: str | None, name: str, n: int) -> list[tuple[int, float]]:
        """The last `n` points of a metric, oldest first (what a sparkline draws)."""
        rows = self.conn.execute("SELECT step, value FROM metrics WHERE run_id IS ? AND name = ?"
                                 " ORDER BY step DESC, id DESC LIMIT ?", (run_id, name, n))
        return [(r[0], r[1]) for r in rows][::-1]

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
        return self._one("SELECT COUNT(DISTINCT group_id) FROM rollouts WHERE run_id = ? AND iteration = ?"
                         " AND purpose = ?", run_id, iteration, purpose)[0]

    def task_matrix(self, run_id: str | None) -> list[tuple[str, int, str, str, int]]:
        """(family, difficulty, split, status, count) over the task pool."""
        rows = self.conn.execute("SELECT family, difficulty, split, status, COUNT(*) FROM tasks WHERE run_id IS ?"
                                 " GROUP BY family, difficulty, split, status ORDER BY family, difficulty",
                                 (run_id,))
        return [tuple(r) for r in rows]

    def tasks_page(self, run_id: str | None, family: str, difficulty: int, *, limit: int = 50,
                   offset: int = 0) -> list[Task]:
        rows = self.conn.execute("SELECT * FROM tasks WHERE run_id IS ? AND family = ? AND difficulty = ?"
                                 " ORDER BY created_at, id LIMIT ? OFFSET ?", (run_id, family, difficulty, limit, offset))
        return [_task(r) for r in rows]

    def heldout_curve(self, run_id: str) -> list[tuple[int, float]]:
        """Held-out pass@1 per iteration over all families (from `evals`)."""
        rows = self.conn.execute("SELECT iteration, 1.0 * SUM(passed) / SUM(n) FROM evals WHERE run_id = ?"
                                 " AND n > 0 GROUP BY iteration ORDER BY iteration", (run_id,))
        return [(r[0], r[1]) for r in rows]

    def report_iterations(self, run_id: str) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT iteration FROM reports WHERE run_id = ? ORDER BY iteration",
                                                (run_id,))]

    # --- lineage: the base model and the policy versions trained from it (see appliance.lineage) -------
    def current_lineage(self) -> dict[str, Any] | None:
        """The lineage the engine serves from (None before the first start recorded a base)."""
        row = self._one("SELECT l.* FROM lineages l JOIN engine e ON e.lineage_id = l.id WHERE e.id = 1")
        return _lineage(row) if row else None

    def lineages(self) -> list[dict[str, Any]]:
        return [_lineage(r) for r in self.conn.execute("SELECT * FROM lineages ORDER BY id")]

    def get_lineage(self, lineage_id: int) -> dict[str, Any]:
        row = self._one("SELECT * FROM lineages WHERE id = ?", lineage_id)
        if row is None:
            raise NotFoundError(f"no lineage {lineage_id}", "`appliance model show` lists the lineages")
        return _lineage(row)

    def start_lineage(self, identity: dict[str, Any], reason: str, *, adopt_unassigned: bool = False) -> int:
        """Record a base model as a new lineage and serve from it: the engine row goes back to policy
        version 0 on the base (its weights forgotten). `adopt_unassigned` gives runs and checkpoints that
        predate lineages (NULL) to it: a store used before lineages were recorded."""
        t = now()
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO lineages (base_path, base_name, model_type, parameters, content_hash, files, reason,"
                " created_at) VALUES (?,?,?,?,?,?,?,?)",
                (identity["path"], identity["name"], identity.get("model_type"), identity.get("parameters"),
                 identity["content_hash"], _json(identity.get("files", {})), reason, t))
            lineage_id = cur.lastrowid
            c.execute("INSERT INTO policy_versions (lineage_id, version, parent_version, kind, weights, created_at)"
                      " VALUES (?, 0, NULL, 'base', ?, ?)", (lineage_id, identity["path"], t))
            if adopt_unassigned:
                c.execute("UPDATE runs SET lineage_id = ? WHERE lineage_id IS NULL", (lineage_id,))
                c.execute("UPDATE checkpoints SET lineage_id = ? WHERE lineage_id IS NULL", (lineage_id,))
                c.execute("UPDATE engine SET lineage_id = ? WHERE id = 1", (lineage_id,))
            else:
                c.execute("UPDATE engine SET lineage_id = ?, policy_version = 0, weights = NULL WHERE id = 1",
                          (lineage_id,))
            c.execute("INSERT INTO events (run_id, kind, message, data, created_at) VALUES (?,?,?,?,?)",
                      (None, "lineage", f"lineage {lineage_id}: {identity['name']} ({reason})",
                       _json({"lineage_id": lineage_id, "path": identity["path"]}), t))
        return lineage_id

    def update_lineage_files(self, lineage_id: int, path: str, files: dict[str, Any]) -> None:
        """The same base seen at another path or with new file times (content unchanged)."""
        with self.write() as c:
            c.execute("UPDATE lineages SET base_path = ?, files = ? WHERE id = ?", (path, _json(files), lineage_id))

    def add_policy_version(self, version: int, parent_version: int | None, kind: str, weights: str) -> None:
        """A version the engine now serves, in the current lineage (idempotent: a re-sync replaces it)."""
        with self.write() as c:
            c.execute(
                "INSERT INTO policy_versions (lineage_id, version, parent_version, kind, weights, created_at)"
                " SELECT lineage_id, ?, ?, ?, ?, ? FROM engine WHERE id = 1 AND lineage_id IS NOT NULL"
                " ON CONFLICT (lineage_id, version) DO UPDATE SET parent_version = excluded.parent_version,"
                " kind = excluded.kind, weights = excluded.weights",
                (version, parent_version, kind, weights, now()))

    def policy_versions(self, lineage_id: int) -> list[dict[str, Any]]:
        """The versions of a lineage, oldest first, each with the checkpoint (run, iteration, metrics) that made it."""
        rows = self.conn.execute(
            "SELECT v.*, c.run_id, c.iteration, c.path AS checkpoint_path, c.metrics FROM policy_versions v"
            " LEFT JOIN checkpoints c ON c.id = (SELECT MAX(id) FROM checkpoints WHERE lineage_id = v.lineage_id"
            " AND policy_version = v.version) WHERE v.lineage_id = ? ORDER BY v.version", (lineage_id,))
        return [{**dict(r), "metrics": json.loads(r["metrics"] or "{}")} for r in rows]

    def checkpoint_of_version(self, version: int) -> Checkpoint | None:
        """The checkpoint that made `version` in the engine's current lineage (None for the base)."""
        row = self._one("SELECT * FROM checkpoints WHERE policy_version = ? AND lineage_id IS (SELECT lineage_id"
                        " FROM engine WHERE id = 1) ORDER BY id DESC LIMIT 1", version)
        return _checkpoint(row) if row else None

    def run_lineage(self, run_id: str) -> int | None:
        row = self._one("SELECT lineage_id FROM runs WHERE id = ?", run_id)
        return row["lineage_id"] if row else None

    def version_evals(self, lineage_id: int, version: int) -> list[dict[str, Any]]:
        """Held-out cells measured on one policy version of a lineage (every run and iteration that did)."""
        rows = self.conn.execute(
            "SELECT e.run_id, e.iteration, e.family, e.difficulty, e.n, e.passed FROM evals e JOIN runs r"
            " ON r.id = e.run_id WHERE r.lineage_id = ? AND e.policy_version = ? ORDER BY e.run_id, e.iteration,"
            " e.family, e.difficulty", (lineage_id, version))
        return [dict(r) for r in rows]

    def step_metric_names(self, run_id: str, first_step: int, last_step: int) -> dict[str, int]:
        """How many optimizer steps in (first_step, last_step] recorded each metric name."""
        rows = self.conn.execute("SELECT name, COUNT(DISTINCT step) FROM metrics WHERE run_id = ? AND step > ?"
                                 " AND step <= ? GROUP BY name", (run_id, first_step, last_step))
        return {r[0]: r[1] for r in rows}

    def move_checkpoint_paths(self, lineage_id: int, old_prefix: str, new_prefix: str) -> None:
        """Checkpoint folders of a lineage moved (archived by `appliance model use`): rewrite their paths."""
        n = len(old_prefix)
        with self.write() as c:
            c.execute("UPDATE checkpoints SET path = ? || substr(path, ?) WHERE lineage_id = ? AND substr(path, 1, ?) = ?",
                      (new_prefix, n + 1, lineage_id, n, old_prefix))
            c.execute("UPDATE policy_versions SET weights = ? || substr(weights, ?) WHERE lineage_id = ?"
                      " AND substr(weights, 1, ?) = ?", (new_prefix, n + 1, lineage_id, n, old_prefix))

    def counts(self) -> dict[str, int]:
        """Rows per table: what `appliance status` and doctor show."""
        tables = ["runs", "iterations", "tasks", "rollouts", "model_calls", "samples", "events"]
        return {t: self._one(f"SELECT COUNT(*) FROM {t}")[0] for t in tables}


    # --- demonstrations (SFT data only; see appliance.demonstrations) -------------------------------
    def add_demonstration(self, demo: Demonstration) -> bool:
        """Insert a demonstration; False when the run already has this conversation (same digest)."""
        with self.write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO demonstrations (run_id, task_id, family, difficulty, origin, iteration, digest,"
                " messages, token_ids, mask, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (demo.run_id, demo.task_id, demo.family, demo.difficulty, demo.origin, demo.iteration, demo.digest,
                 _json(demo.messages), pack_ints(demo.token_ids), pack_ints(demo.mask), demo.created_at))
            return cur.rowcount > 0

    def demonstrations(self, run_id: str | None, *, levels: Iterable[int] | None = None,
                       origin: str | None = None) -> list[Demonstration]:
        sql, args = "SELECT * FROM demonstrations WHERE run_id IS ?", [run_id]
        if levels is not None:
            lv = sorted(set(levels))
            sql += f" AND difficulty IN ({','.join('?' * len(lv))})"
            args += lv
        if origin is not None:
            sql += " AND origin = ?"
            args.append(origin)
        rows = self.conn.execute(sql + " ORDER BY id", args)
        return [Demonstration(r["run_id"], r["task_id"], r["family"], r["difficulty"], r["origin"],
                              json.loads(r["messages"]), unpack_ints(r["token_ids"]), unpack_ints(r["mask"]),
                              r["digest"], r["iteration"], r["id"], r["created_at"]) for r in rows]

    def demonstrated_task_ids(self, run_id: str | None) -> set[str]:
        rows = self.conn.execute("SELECT DISTINCT task_id FROM demonstrations WHERE run_id IS ?", (run_id,))
        return {r[0] for r in rows if r[0]}

    def demonstration_counts(self, run_id: str | None) -> dict[str, int]:
        """Demonstrations per origin ("reference", "hindsight")."""
        rows = self.conn.execute("SELECT origin, COUNT(*) FROM demonstrations WHERE run_id IS ? GROUP BY origin",
                                 (run_id,))
        return {r[0]: r[1] for r in rows}

def _iteration(r: sqlite3.Row) -> Iteration:
    return Iteration(r["id"], r["run_id"], r["idx"], Phase(r["phase"]), IterationStatus(r["status"]),
                     r["policy_version"], r["started_at"], r["finished_at"], r["error"])


def _task(r: sqlite3.Row) -> Task:
    return Task(r["id"], r["run_id"], r["family"], r["difficulty"], r["source"], Split(r["split"]),
                TaskStatus(r["status"]), json.loads(r["spec"]), r["reject_reason"], r["pass_rate"], r["created_at"])


def _rollout(r: sqlite3.Row) -> Rollout:
    return Rollout(r["id"], r["run_id"], r["task_id"], r["group_id"], r["iteration"], r["harness"],
                   r["policy_version"], RolloutStatus(r["status"]), r["purpose"],
                   Outcome(r["outcome"]) if r["outcome"] else None, r["reward"], r["error"], r["turns"],
                   r["started_at"], r["finished_at"], r["created_at"])


def _model_call(r: sqlite3.Row) -> ModelCall:
    return ModelCall(r["id"], r["rollout_id"], r["seq"], r["status"], json.loads(r["request"]),
                     json.loads(r["response"]) if r["response"] else None, unpack_ints(r["prompt_ids"]),
                     unpack_ints(r["completion_ids"]), unpack_floats(r["logprobs"]), r["policy_version"],
                     r["latency_s"], r["error"], r["created_at"], r["temperature"])


def _checkpoint(r: sqlite3.Row) -> Checkpoint:
    return Checkpoint(r["run_id"], r["policy_version"], r["iteration"], r["kind"], r["path"],
                      json.loads(r["metrics"] or "{}"), r["created_at"], r["id"])


def _event(r: sqlite3.Row) -> Event:
    return Event(r["kind"], r["message"], r["run_id"], json.loads(r["data"] or "{}"), r["duration_s"],
                 r["created_at"], r["id"])


def _control(r: sqlite3.Row) -> Control:
    return Control(r["id"], r["run_id"], ControlCommand(r["command"]), ControlStatus(r["status"]), r["result"],
                   r["created_at"], r["acked_at"])


def _lineage(r: sqlite3.Row) -> dict[str, Any]:
    return {**dict(r), "files": json.loads(r["files"] or "{}")}
