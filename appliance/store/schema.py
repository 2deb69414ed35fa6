"""The store's schema: the migrations, applied in order (sqlite-migrate), each with its record in one commit.

A migration's name is its identity in every existing store (`_sqlite_migrations`): never rename, reorder or
edit one that has shipped; change the schema with a new function at the end (`Store.migrate` refuses a
store that records a migration this build does not know).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlite_migrate import Migrations

if TYPE_CHECKING:  # at run time `db` imported it already, without pandas (lean_sqlite_utils)
    import sqlite_utils

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


@migrations()
def m008_task_iteration(db: sqlite_utils.Database) -> None:
    # The iteration a task was made for is a column (it was read out of the spec's JSON, spec.meta.iteration,
    # which still carries it as provenance for exported task files). Rows of older stores are back-filled from
    # that JSON; tasks made outside an iteration (held-out set, imported, warm-start pool) stay NULL.
    db.executescript(
        """
        ALTER TABLE tasks ADD COLUMN iteration INTEGER;
        UPDATE tasks SET iteration = CAST(json_extract(spec, '$.meta.iteration') AS INTEGER)
        WHERE json_type(spec, '$.meta.iteration') = 'integer';
        CREATE INDEX tasks_by_iteration ON tasks (run_id, iteration, status);
        """
    )


@migrations()
def m009_retired_routes(db: sqlite_utils.Database) -> None:
    # A rollout that is requeued (or given a new route) retires its old token: a call still in flight from
    # the interrupted attempt must not land on the re-run. Only the token's hash is kept, as for live routes.
    db.executescript(
        """
        CREATE TABLE retired_routes (
            route_hash TEXT PRIMARY KEY, rollout_id TEXT NOT NULL, retired_at REAL NOT NULL);
        """
    )


@migrations()
def m010_devset_guard(db: sqlite_utils.Database) -> None:
    # The transfer dev set (split 'dev') is refused for training exactly as the held-out set is (m004, m007):
    # no training rollout, no demonstration, and a dev task never moves to another split. Named m010 because
    # m009 is taken by a concurrent change (retired routes); the names only need to be distinct and in order.
    db.executescript(
        """
        CREATE TRIGGER dev_not_trained BEFORE INSERT ON rollouts
        WHEN NEW.purpose = 'train' AND NEW.task_id IN (SELECT id FROM tasks WHERE split = 'dev')
        BEGIN SELECT RAISE(ABORT, 'dev-set task used in a training rollout'); END;
        CREATE TRIGGER dev_split_fixed BEFORE UPDATE OF split ON tasks
        WHEN OLD.split = 'dev' AND NEW.split != 'dev'
        BEGIN SELECT RAISE(ABORT, 'a dev-set task cannot move to another split'); END;
        CREATE TRIGGER dev_not_demonstrated BEFORE INSERT ON demonstrations
        WHEN NEW.task_id IN (SELECT id FROM tasks WHERE split = 'dev')
        BEGIN SELECT RAISE(ABORT, 'dev-set task used in a demonstration'); END;
        """
    )


@migrations()
def m011_reward_on_the_rollout_alone(db: sqlite_utils.Database) -> None:
    # A rollout's reward had a second home on each of its samples (a copy made when the samples were built,
    # overwritten from the rollout again on the way to the loss). The rollout is its one home now: the
    # trainer reads it there (`training.advantages.build_groups`), so a sample's copy could only disagree.
    db.executescript("ALTER TABLE samples DROP COLUMN reward;")


@migrations()
def m012_demonstration_sequences(db: sqlite_utils.Database) -> None:
    # A chat template that is not prefix-stable (Qwen3, Llama 3.2) makes a demonstration one training
    # sequence per turn (appliance.serving.template): `lengths` says where each ends in token_ids (NULL: one).
    db.executescript("ALTER TABLE demonstrations ADD COLUMN lengths BLOB;")


@migrations()
def m013_loop_heartbeat(db: sqlite_utils.Database) -> None:
    # The live loop's heartbeat (`appliance.control.Steering`): one row, rewritten about every second by a
    # thread of `appliance run` whatever phase runs, with the phase's progress. A requester decides from it
    # whether a loop is alive (absent or stale: none is, and nothing is queued), not from a timeout.
    db.executescript(
        """
        CREATE TABLE heartbeat (
            id INTEGER PRIMARY KEY CHECK (id = 1), run_id TEXT NOT NULL, pid INTEGER NOT NULL,
            started_at REAL NOT NULL, beat_at REAL NOT NULL, progress TEXT);
        """
    )


@migrations()
def m014_eval_sets(db: sqlite_utils.Database) -> None:
    # `appliance eval` on a set of the user's tasks (issue 53): one row per evaluation; its rollouts are rows
    # of `rollouts` without a run (purpose 'eval', group_id = this id), out of every run's reach.
    db.executescript(
        """
        CREATE TABLE eval_sets (
            id TEXT PRIMARY KEY, paths TEXT NOT NULL, policy_version INTEGER NOT NULL, harness TEXT NOT NULL,
            k INTEGER NOT NULL, summary TEXT NOT NULL, created_at REAL NOT NULL);
        """
    )


@migrations()
def m015_eval_sets_of_runs(db: sqlite_utils.Database) -> None:
    # evaluation.extra_sets (issue 53): a run measures the user's task sets at each evaluation; each is an
    # eval_sets row of that run and iteration (name = the set's path as configured). Its rollouts still
    # belong to no run (run_id NULL), so nothing the loop practises or trains on can hold them. NULL run_id:
    # an `appliance eval` row.
    db.executescript(
        """
        ALTER TABLE eval_sets ADD COLUMN run_id TEXT;
        ALTER TABLE eval_sets ADD COLUMN iteration INTEGER;
        ALTER TABLE eval_sets ADD COLUMN name TEXT;
        CREATE INDEX eval_sets_of_runs ON eval_sets (run_id, name, iteration);
        """)
