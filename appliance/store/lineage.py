"""The engine row (its state machine and the policy version it serves) and the model's lineage: the base
model and the policy versions trained from it (see appliance.lineage for the rules)."""

from __future__ import annotations

from typing import Any

from appliance.errors import NotFoundError
from appliance.schemas import ENGINE_TRANSITIONS, Checkpoint, EngineState, Event, check_transition, now
from appliance.store import records
from appliance.store.db import Database
from appliance.store.events import insert_event


class LineageRecords(Database):
    # --- engine ---------------------------------------------------------------------------------
    def engine_state(self) -> tuple[EngineState, int, str | None]:
        row = self.one("SELECT state, policy_version, weights FROM engine WHERE id = 1")
        assert row is not None  # m002 inserts the one engine row
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
            insert_event(c, Event("engine", state, None, {"policy_version": policy_version, "error": error}))

    # --- lineage: the base model and the policy versions trained from it -------------------------
    def current_lineage(self) -> dict[str, Any] | None:
        """The lineage the engine serves from (None before the first start recorded a base)."""
        row = self.one("SELECT l.* FROM lineages l JOIN engine e ON e.lineage_id = l.id WHERE e.id = 1")
        return records.lineage(row) if row else None

    def lineages(self) -> list[dict[str, Any]]:
        return [records.lineage(r) for r in self.conn.execute("SELECT * FROM lineages ORDER BY id")]

    def get_lineage(self, lineage_id: int) -> dict[str, Any]:
        row = self.one("SELECT * FROM lineages WHERE id = ?", lineage_id)
        if row is None:
            raise NotFoundError(f"no lineage {lineage_id}", "`appliance model show` lists the lineages")
        return records.lineage(row)

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
                 identity["content_hash"], records.to_json(identity.get("files", {})), reason, t))
            lineage_id = cur.lastrowid
            assert lineage_id is not None
            c.execute("INSERT INTO policy_versions (lineage_id, version, parent_version, kind, weights, created_at)"
                      " VALUES (?, 0, NULL, 'base', ?, ?)", (lineage_id, identity["path"], t))
            if adopt_unassigned:
                c.execute("UPDATE runs SET lineage_id = ? WHERE lineage_id IS NULL", (lineage_id,))
                c.execute("UPDATE checkpoints SET lineage_id = ? WHERE lineage_id IS NULL", (lineage_id,))
                c.execute("UPDATE engine SET lineage_id = ? WHERE id = 1", (lineage_id,))
            else:
                c.execute("UPDATE engine SET lineage_id = ?, policy_version = 0, weights = NULL WHERE id = 1",
                          (lineage_id,))
            insert_event(c, Event("lineage", f"lineage {lineage_id}: {identity['name']} ({reason})", None,
                                  {"lineage_id": lineage_id, "path": identity["path"]}, created_at=t))
        return lineage_id

    def update_lineage_files(self, lineage_id: int, path: str, files: dict[str, Any]) -> None:
        """The same base seen at another path or with new file times (content unchanged)."""
        with self.write() as c:
            c.execute("UPDATE lineages SET base_path = ?, files = ? WHERE id = ?",
                      (path, records.to_json(files), lineage_id))

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
        return [{**dict(r), "metrics": records.from_json(r["metrics"])} for r in rows]

    def checkpoint_of_version(self, version: int) -> Checkpoint | None:
        """The checkpoint that made `version` in the engine's current lineage (None for the base)."""
        row = self.one("SELECT * FROM checkpoints WHERE policy_version = ? AND lineage_id IS (SELECT lineage_id"
                       " FROM engine WHERE id = 1) ORDER BY id DESC LIMIT 1", version)
        return records.checkpoint(row) if row else None

    def run_lineage(self, run_id: str) -> int | None:
        row = self.one("SELECT lineage_id FROM runs WHERE id = ?", run_id)
        return row["lineage_id"] if row else None

    def version_evals(self, lineage_id: int, version: int) -> list[dict[str, Any]]:
        """Held-out cells measured on one policy version of a lineage (every run and iteration that did)."""
        rows = self.conn.execute(
            "SELECT e.run_id, e.iteration, e.family, e.difficulty, e.n, e.passed FROM evals e JOIN runs r"
            " ON r.id = e.run_id WHERE r.lineage_id = ? AND e.policy_version = ? ORDER BY e.run_id, e.iteration,"
            " e.family, e.difficulty", (lineage_id, version))
        return [dict(r) for r in rows]

    def move_checkpoint_paths(self, lineage_id: int, old_prefix: str, new_prefix: str) -> None:
        """Checkpoint folders of a lineage moved (archived by `appliance model use`): rewrite their paths."""
        n = len(old_prefix)
        with self.write() as c:
            c.execute("UPDATE checkpoints SET path = ? || substr(path, ?) WHERE lineage_id = ?"
                      " AND substr(path, 1, ?) = ?",
                      (new_prefix, n + 1, lineage_id, n, old_prefix))
            c.execute("UPDATE policy_versions SET weights = ? || substr(weights, ?) WHERE lineage_id = ?"
                      " AND substr(weights, 1, ?) = ?", (new_prefix, n + 1, lineage_id, n, old_prefix))
