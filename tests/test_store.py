import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import NotFoundError, StoreError, TransitionError
from appliance.schemas import (
    CapabilityReport,
    EngineState,
    Event,
    ModelCall,
    Outcome,
    Rollout,
    RolloutStatus,
    RunStatus,
    Sample,
    Split,
    Task,
    TaskStatus,
)
from appliance.store import Store, migrations


def _rollout(rid: str, **kw) -> Rollout:
    return Rollout(id=rid, run_id=kw.get("run_id"), task_id=None, group_id=kw.get("group_id"), iteration=0,
                   harness="builtin", policy_version=0, status=RolloutStatus.PENDING)


def test_migrates_an_empty_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "a.db")
    assert store.applied_migrations() \
        == [m.name for m in migrations.pending(__import__("sqlite_utils").Database(memory=True))]
    tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "iterations", "tasks", "rollouts", "model_calls", "samples", "checkpoints", "evals",
            "reports", "events", "metrics", "validations", "engine"} <= tables
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # applying again is a no-op
    assert store.migrate() == []


def test_migrates_from_the_previous_schema_keeping_rows(tmp_path: Path) -> None:
    names = [m.name for m in migrations.pending(__import__("sqlite_utils").Database(memory=True))]
    store = Store(tmp_path / "b.db", migrate=False)
    store.migrate(stop_before=names[-1])
    assert store.applied_migrations() == names[:-1]
    store.conn.execute("INSERT INTO runs (id, status, config, created_at, updated_at) VALUES ('r1','running','{}',0,0)")
    assert store.migrate() == [names[-1]]
    assert store.get_run("r1").status == RunStatus.RUNNING


def test_a_store_from_another_build_is_refused_untouched(tmp_path: Path) -> None:
    # The shape of a real failure: a development branch named its lineage migration m005_lineage, the
    # merged build renumbered it; migrating that store again died half-way on "table lineages already exists".
    path = tmp_path / "c.db"
    Store(path).conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES ('appliance', 'm005_lineage', '')")
    before = Store(path, migrate=False).applied_migrations()
    with pytest.raises(StoreError) as e:
        Store(path)
    assert "m005_lineage" in e.value.message and "APPLIANCE_HOME" in e.value.hint
    assert Store(path, migrate=False).applied_migrations() == before


def _open_store(path: str, start: Any, failures: Any) -> None:
    start.wait()
    try:
        Store(path)
    except StoreError as e:
        failures.put(e.message)


def test_processes_opening_a_fresh_store_at_once_all_get_it_migrated(tmp_path: Path) -> None:
    # The shape of two real CI failures: a test opened the store while the run it watched was still
    # creating it, and one of the two died on "table runs already exists", then on "database is locked"
    # (the switch to WAL). Forked, so that the processes meet at the barrier already imported and race.
    ctx = multiprocessing.get_context("fork")
    start, failures = ctx.Barrier(8), ctx.Queue()
    for attempt in range(20):
        path = str(tmp_path / f"fresh-{attempt}.db")
        procs = [ctx.Process(target=_open_store, args=(path, start, failures)) for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert all(p.exitcode == 0 for p in procs)
        assert failures.empty(), failures.get()
        assert Store(path, migrate=False).applied_migrations() == Store(tmp_path / "ref.db").applied_migrations()


def test_run_transitions_are_enforced(store: Store) -> None:
    run = store.create_run("run-1", {"profile": "cpu"})
    assert store.create_run("run-1", {"other": 1}).config == run.config  # idempotent
    store.set_run_status("run-1", RunStatus.PAUSED)
    store.set_run_status("run-1", RunStatus.RUNNING)
    store.set_run_status("run-1", RunStatus.DONE)
    with pytest.raises(TransitionError) as e:
        store.set_run_status("run-1", RunStatus.RUNNING)
    assert "'done'" in e.value.message and e.value.hint
    with pytest.raises(NotFoundError):
        store.set_run_status("nope", RunStatus.DONE)


def test_rollout_lifecycle_and_refusals(store: Store) -> None:
    store.add_rollout(_rollout("ro-1"))
    assert not store.add_rollout(_rollout("ro-1"))  # idempotent create
    with pytest.raises(TransitionError):
        store.requeue_rollout("ro-1")  # pending -> pending is not a move
    store.start_rollout("ro-1")
    store.finish_rollout("ro-1", Outcome.SUCCESS, 1.0, turns=3)
    r = store.get_rollout("ro-1")
    assert (r.status, r.outcome, r.reward, r.turns) == (RolloutStatus.FINISHED, Outcome.SUCCESS, 1.0, 3)
    with pytest.raises(TransitionError, match="final state"):
        store.start_rollout("ro-1")


def test_requeue_forgets_the_interrupted_calls(store: Store) -> None:
    store.add_rollout(_rollout("ro-2"))
    store.start_rollout("ro-2")
    store.add_model_call(ModelCall(None, "ro-2", -1, "ok", {}, {}, [1], [2], [-0.5], 0, 0.01))
    store.requeue_rollout("ro-2")
    assert store.model_calls("ro-2") == []
    assert store.get_rollout("ro-2").status == RolloutStatus.PENDING


def test_task_transitions(store: Store) -> None:
    t = Task("t1", None, "files", 1, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {"instruction": "x"})
    assert store.add_task(t) and not store.add_task(t)
    store.set_task_status("t1", TaskStatus.REJECTED, reason="reference fails")
    assert store.get_task("t1").reject_reason == "reference fails"
    with pytest.raises(TransitionError):
        store.set_task_status("t1", TaskStatus.VALID)


def test_model_calls_round_trip_exact_tokens(store: Store) -> None:
    store.add_rollout(_rollout("ro-3"))
    ids = list(range(49150, 49152)) + [0, 1, 2**31 - 1]
    call = ModelCall(None, "ro-3", -1, "ok", {"messages": []}, {"id": "x"}, ids, [5, 6], [-0.125, -2.5], 0, 0.1)
    store.add_model_call(call)
    store.add_model_call(ModelCall(None, "ro-3", -1, "ok", {}, None, [1], [2], [-1.0], 0, 0.1))
    calls = store.model_calls("ro-3")
    assert [c.seq for c in calls] == [0, 1]
    assert calls[0].prompt_ids == ids and calls[0].completion_ids == [5, 6]
    assert calls[0].logprobs == [-0.125, -2.5]


def test_samples_are_replaced_per_rollout(store: Store) -> None:
    s = Sample("ro-4", "g", 0, [1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.25], 0)
    store.add_samples([s])
    store.add_samples([s])
    assert len(store.samples("ro-4")) == 1 and store.samples("ro-4")[0].mask == [0, 1, 1]


def test_engine_state_machine(store: Store) -> None:
    assert store.engine_state()[0] == EngineState.STOPPED
    store.set_engine_state(EngineState.STARTING)
    store.set_engine_state(EngineState.SERVING, policy_version=0)
    with pytest.raises(TransitionError):
        store.set_engine_state(EngineState.SYNCING)  # must drain and sleep first
    for s in (EngineState.DRAINING, EngineState.SLEEPING, EngineState.SYNCING, EngineState.WAKING,
              EngineState.CANARY):
        store.set_engine_state(s)
    store.set_engine_state(EngineState.SERVING, policy_version=1)
    assert store.engine_state()[:2] == (EngineState.SERVING, 1)
    assert [e.message for e in store.events(kind="engine")][-1] == "serving"


def test_concurrent_thread_writers_lose_nothing(store: Store) -> None:
    def writer(n: int) -> None:
        for i in range(100):
            store.add_event(Event("info", f"{n}-{i}"))
            store.add_metrics(None, i, {f"w{n}": float(i)})

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.events(limit=10_000)) == 800
    assert len(store.metric_series(None, "w3")) == 100


def _process_writer(path: str, n: int) -> None:
    s = Store(path)
    for i in range(50):
        s.add_rollout(_rollout(f"p{n}-{i}"))
        s.start_rollout(f"p{n}-{i}")
        s.add_model_call(ModelCall(None, f"p{n}-{i}", -1, "ok", {}, {}, [1, 2], [3], [-0.1], 0, 0.0))
        s.finish_rollout(f"p{n}-{i}", Outcome.FAILURE, 0.0)


def test_concurrent_process_writers_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    Store(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(path, n)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    store = Store(path)
    assert store.counts()["rollouts"] == 200 and store.counts()["model_calls"] == 200
    assert len(store.rollouts(status=RolloutStatus.FINISHED)) == 200


def test_unwritable_home_is_a_clear_error(tmp_path: Path) -> None:
    from appliance.errors import StoreError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open the store"):
        Store(blocker / "sub" / "a.db")


def test_a_failed_write_rolls_back(store: Store) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        with store.write() as c:
            c.execute("INSERT INTO runs (id, status, config, created_at, updated_at) VALUES ('x','running','{}',0,0)")
            c.execute("INSERT INTO runs (id, status, config, created_at, updated_at) VALUES ('x','running','{}',0,0)")
    assert store.latest_run() is None


def test_evals_and_reports_are_replaced_not_duplicated(store: Store) -> None:
    store.create_run("r", {})
    store.set_eval("r", 0, 0, "files", 1, 10, 2)
    store.set_eval("r", 0, 0, "files", 1, 10, 3)
    assert store.evals("r") == [{"iteration": 0, "policy_version": 0, "family": "files", "difficulty": 1, "n": 10,
                                 "passed": 3}]
    store.save_report("r", 0, CapabilityReport(iteration=0, rollouts=1), "# one")
    store.save_report("r", 0, CapabilityReport(iteration=0, rollouts=2), "# two")
    store.save_report("r", 1, CapabilityReport(iteration=1, rollouts=3), "# three")
    assert store.report("r", 0) == (CapabilityReport(iteration=0, rollouts=2), "# two")
    assert store.report("r") == (CapabilityReport(iteration=1, rollouts=3), "# three")
    assert store.report("r", 7) is None


def test_a_report_stored_by_another_build_is_read_and_saved_back_whole(store: Store) -> None:
    # An older build's report lacks fields (and held null where a table belongs); a newer one has keys this
    # build does not know: both are read, and saving the record back loses nothing.
    store.create_run("r", {})
    with store.write() as c:
        c.execute("INSERT INTO reports (run_id, iteration, json, markdown, created_at) VALUES (?,?,?,?,?)",
                  ("r", 0, '{"iteration": 0, "train": {"files": {"1": {"n": 4, "passed": 1}}}, "habits": null, '
                           '"from_a_newer_build": [1, 2]}', "# old", 0.0))
    report, _ = store.report("r", 0) or (None, "")
    assert report is not None and report.train["files"]["1"]["n"] == 4
    assert report.habits == {} and report.train_bare is None and report.levels == {}
    assert report.extra == {"from_a_newer_build": [1, 2]}
    store.save_report("r", 0, report, "# old")
    again, _ = store.report("r", 0) or (None, "")
    assert again == report and again is not None and again.as_dict()["from_a_newer_build"] == [1, 2]


def test_backup_is_a_consistent_copy_taken_while_writing(store: Store, tmp_path: Path) -> None:
    store.create_run("run-1", {"profile": "cpu"})
    for i in range(50):
        store.add_rollout(_rollout(f"r{i}", run_id="run-1"))
    dest = store.backup(tmp_path / "backups" / "copy.db")
    copy = Store(dest, migrate=False)
    assert copy.get_run("run-1").config == {"profile": "cpu"}
    assert copy.conn.execute("SELECT count(*) FROM rollouts").fetchone()[0] == 50
    assert copy.applied_migrations() == store.applied_migrations()
    assert not (tmp_path / "backups" / "copy.db.partial").exists()
    copy.close()


def test_backup_refuses_to_overwrite_the_store(store: Store) -> None:
    from appliance.errors import StoreError

    with pytest.raises(StoreError) as e:
        store.backup(store.path)
    assert "onto itself" in e.value.message


def test_finish_rollout_writes_its_samples_in_the_same_transaction(store: Store) -> None:
    from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample

    store.add_rollout(Rollout("r", None, None, "g", 0, "builtin", 0, RolloutStatus.PENDING))
    store.start_rollout("r")
    sample = Sample("r", "g", 0, [1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.25], 0, temperature=0.7)
    with pytest.raises(sqlite3.IntegrityError):  # two samples of one branch: the write fails as a whole
        store.finish_rollout("r", Outcome.SUCCESS, 1.0, samples=[sample, sample])
    assert store.get_rollout("r").status == RolloutStatus.RUNNING and store.samples("r") == []
    store.finish_rollout("r", Outcome.SUCCESS, 1.0, samples=[sample])
    assert store.get_rollout("r").status == RolloutStatus.FINISHED
    assert store.samples("r") == [sample]  # the temperature comes back too


def test_a_task_iteration_moves_from_the_spec_to_its_column(tmp_path: Path) -> None:
    # A store from before m008 kept a task's iteration only inside its spec JSON (spec.meta.iteration).
    store = Store(tmp_path / "d.db", migrate=False)
    store.migrate(stop_before="m008_task_iteration")
    assert "m008_task_iteration" not in store.applied_migrations()
    insert = ("INSERT INTO tasks (id, run_id, family, difficulty, source, split, status, spec, created_at)"
              " VALUES (?, 'r1', 'files', 1, 'procedural', ?, 'valid', ?, 0)")
    store.conn.execute(insert, ("t-old", "train", '{"id":"t-old","meta":{"iteration":3,"round":"new"}}'))
    store.conn.execute(insert, ("t-held", "heldout", '{"id":"t-held","meta":{}}'))
    assert store.migrate()[0] == "m008_task_iteration"  # later migrations follow it
    assert store.get_task("t-old").iteration == 3 and store.get_task("t-held").iteration is None
    assert [t.id for t in store.tasks("r1", iteration=3)] == ["t-old"]
    # a new task's iteration is written to the column from the record
    store.add_task(Task("t-new", "r1", "files", 1, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {"id": "t-new"},
                        iteration=4))
    assert [t.id for t in store.tasks("r1", iteration=4)] == ["t-new"]
