"""The store's file: per-thread connections, short write transactions, migration, online backup.

Writes run in `BEGIN IMMEDIATE` transactions (taking the write lock up front, so WAL readers never have to
upgrade and fail with "database is locked") with a generous busy timeout; each thread gets its own
connection. Every part of `Store` (the modules beside this one) is a subclass of `Database` and reaches
the file only through `conn`, `write` and `one`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.errors import LoopLocked, StoreBusy, StoreError, StoreFull
from appliance.store.lean_sqlite_utils import sqlite_utils
from appliance.store.schema import migrations

BUSY_TIMEOUT_MS = 30_000


class Database:
    """One SQLite file (WAL), shared between threads: a connection per thread, opened on first use."""

    def __init__(self, path: Path | str, *, migrate: bool = True) -> None:
        self.path = Path(path)
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot open the store at {self.path}: {e}",
                             "check that APPLIANCE_HOME points to a writable directory") from e
        with self._opening_lock():
            try:
                # Switching a fresh file to WAL needs it alone and SQLite answers "database is locked" at
                # once rather than waiting out the busy timeout, so the switch is made under the lock too.
                self.conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.Error as e:
                raise StoreError(f"cannot open the store at {self.path}: {e}",
                                 "check that APPLIANCE_HOME points to a writable directory") from e
            if migrate:
                self._migrate_locked(None)

    @contextmanager
    def _opening_lock(self) -> Iterator[None]:
        """An exclusive lock on a file beside the store, held while a process sets the store up.

        Two processes opening a fresh store at once (the loop and a TUI, or a test watching a run) would
        both see the same migrations pending and the second would fail on "table already exists"; both
        would try to switch the file to WAL and one would fail on "database is locked".
        """
        lock_path = self.path.with_name(self.path.name + ".open-lock")
        try:
            lock = open(lock_path, "a")  # noqa: SIM115 - closed by the with below
        except OSError as e:
            raise StoreError(f"cannot open the store's lock file {lock_path}: {e}",
                             "check that APPLIANCE_HOME points to a writable directory") from e
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def loop_lock(self) -> Iterator[None]:
        """Held by the one process that runs the loop on this store, for as long as it runs it.

        Two loops on one store would run the same phase twice, draw the same rollouts and sweep each other's
        sandboxes, so a second `appliance run` is refused, naming the first's pid. An flock on a file
        beside the store: the kernel drops it when the holder dies, even by kill -9, so a stale pid in the
        file never locks anyone out.
        """
        lock_path = self._loop_lock_path
        try:
            lock = open(lock_path, "a+")  # noqa: SIM115 - closed below, on every path
        except OSError as e:
            raise StoreError(f"cannot open the store's loop lock {lock_path}: {e}",
                             "check that APPLIANCE_HOME points to a writable directory") from e
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip() or "unknown"
                raise LoopLocked(
                    f"another appliance process (pid {holder}) is running the loop on {self.path}",
                    f"wait for it, stop it (`appliance stop`, or kill {holder}), or give this one its own data "
                    "directory (APPLIANCE_HOME)") from None
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            try:
                yield
            finally:
                lock.truncate(0)
                fcntl.flock(lock, fcntl.LOCK_UN)
        finally:
            lock.close()

    @property
    def _loop_lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".loop-lock")

    def loop_holder(self) -> int | None:
        """The pid of the process that holds the loop lock now, read from the kernel's table of locks without
        taking it (taking it even for a moment would refuse an `appliance run` starting then); None: no
        process holds it, or the table cannot be read."""
        try:
            st = os.stat(self._loop_lock_path)
            with open("/proc/locks") as f:
                table = f.read().splitlines()
        except OSError:
            return None
        ours = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in table:  # "1: FLOCK  ADVISORY  WRITE 13998 fe:00:5727877 0 EOF"; a waiter's reads "1: -> FLOCK"
            fields = line.split()
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == ours:
                return int(fields[4])
        return None

    @property
    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)  # none yet in this thread
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
        """One short write transaction; the write lock is taken at BEGIN, not at the first write.

        Another process that holds the write lock past the busy timeout (an open `sqlite3` shell, a copy
        tool) makes the BEGIN fail: `StoreBusy`, before anything was written, so the caller can wait. A
        full disk rolls the transaction back: `StoreFull` (a `StoreBusy`: nothing written, wait too)."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            raise StoreBusy(
                f"another process held the store's write lock ({self.path}) for over {BUSY_TIMEOUT_MS / 1000:g} s",
                f"find it with `fuser {self.path}` and end its transaction; the loop carries on once it is "
                "released") from e
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            # a COMMIT that failed (disk full) can leave the transaction open, and with it the write lock
            # that every other connection then waits on: roll back whatever is left
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError) and "full" in str(e):
                raise self._full() from e
            raise

    def _full(self) -> StoreFull:
        try:
            free = f"{shutil.disk_usage(self.path.parent).free / 2**20:.1f} MiB free"
        except OSError:
            free = "free space unknown"
        return StoreFull(f"the disk holding the store is full ({self.path.parent}: {free}); nothing was written",
                         "free space on that disk (old checkpoints, logs/); the loop carries on by itself once "
                         "a write succeeds")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)  # this thread may never have opened one
        if conn is not None:
            conn.close()
            self._local.conn = None

    def migrate(self, stop_before: str | None = None) -> list[str]:
        """Apply pending migrations in order; returns the names applied.

        Runs under the opening lock, and reads what is pending only once it holds it.
        """
        with self._opening_lock():
            return self._migrate_locked(stop_before)

    def _migrate_locked(self, stop_before: str | None) -> list[str]:
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

    def applied_migrations(self) -> list[str]:
        return [m.name for m in migrations.applied(sqlite_utils.Database(self.conn))]

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

    def one(self, sql: str, *args: Any) -> sqlite3.Row | None:
        """The first row of a read, or None."""
        row: sqlite3.Row | None = self.conn.execute(sql, args).fetchone()
        return row

    def scalar(self, sql: str, *args: Any) -> Any:
        """The first column of the first row of an aggregate read (COUNT, MAX: always one row)."""
        return self.conn.execute(sql, args).fetchone()[0]


def where(sql: str, filters: dict[str, Any]) -> tuple[str, list[Any]]:
    """`sql` (which ends in a WHERE clause) with `AND col = ?` for each filter that is not None."""
    args = [v for v in filters.values() if v is not None]
    return sql + "".join(f" AND {col} = ?" for col, v in filters.items() if v is not None), args
