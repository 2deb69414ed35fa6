"""A stand-in for the headless appliance that test_tmux.py runs as its own process (no engine, no sandbox):
`python tests/tui/fake_appliance.py DB RUN_ID GO_FILE`. The real loop answers controls the same way
(`appliance.control.answer_pending`), and writes an evaluation's rows as `evaluate` does: the held-out
rollouts (purpose "eval", no group) while they run, then a family × level cell each in `evals`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from appliance.schemas import Event, Outcome, Phase, Rollout, RolloutStatus, Split, Task, TaskStatus
from appliance.store import Store
from appliance.testing import ControlConsumer

HELDOUT = (("h0", "files", 1), ("h1", "git", 2))


def run_fake_appliance(db_path: str, run_id: str, go_file: str, *, timeout_s: float = 120.0) -> None:
    """Write a run in its `synthesize` phase and answer control requests meanwhile; then, each when its file
    appears beside `go_file`: `go` moves to `validate`, `evaluate` to `evaluate` with one held-out rollout
    finished and one running, `evaluated` finishes it and records the cells (1 of 2 passed)."""
    store = Store(db_path)
    store.create_run(run_id, {"profile": "cpu"})
    store.start_iteration(run_id, 0, policy_version=0)
    store.add_event(Event("phase", str(Phase.SYNTHESIZE), run_id, {"iteration": 0}))
    consumer = ControlConsumer(store, run_id)
    go = Path(go_file)
    stages = [(go, lambda: phase(store, run_id, Phase.VALIDATE)),
              (go.with_name("evaluate"), lambda: evaluating(store, run_id)),
              (go.with_name("evaluated"), lambda: evaluated(store, run_id))]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer.poll_once()
        if stages and stages[0][0].exists():
            stages.pop(0)[1]()
        time.sleep(0.1)


def phase(store: Store, run_id: str, to: Phase) -> None:
    store.set_iteration_phase(run_id, 0, to)
    store.add_event(Event("phase", str(to), run_id, {"iteration": 0}))


def evaluating(store: Store, run_id: str) -> None:
    phase(store, run_id, Phase.EVALUATE)
    for task_id, family, level in HELDOUT:
        store.add_task(Task(task_id, run_id, family, level, "procedural", Split.HELDOUT, TaskStatus.VALID, {}))
    store.add_rollouts([
        Rollout("h0.eval0", run_id, "h0", None, 0, "bash-agent", 0, RolloutStatus.FINISHED, "eval", Outcome.SUCCESS,
                1.0, turns=3),
        Rollout("h1.eval0", run_id, "h1", None, 0, "bash-agent", 0, RolloutStatus.RUNNING, "eval")])


def evaluated(store: Store, run_id: str) -> None:
    store.finish_rollout("h1.eval0", Outcome.FAILURE, 0.0)
    store.set_eval(run_id, 0, 0, "files", 1, 1, 1)
    store.set_eval(run_id, 0, 0, "git", 2, 1, 0)


if __name__ == "__main__":
    run_fake_appliance(*sys.argv[1:4])
