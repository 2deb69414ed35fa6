"""A stand-in for the headless appliance that test_tmux.py runs as its own process (no engine, no sandbox):
`python tests/tui/fake_appliance.py DB RUN_ID GO_FILE`. The real loop answers controls the same way
(`appliance.control.answer_pending`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from appliance.schemas import Event, Phase
from appliance.store import Store
from appliance.testing import ControlConsumer


def run_fake_appliance(db_path: str, run_id: str, go_file: str, *, timeout_s: float = 120.0) -> None:
    """Write a run in its `synthesize` phase, wait until `go_file` appears, then move to `validate`, while
    answering control requests."""
    store = Store(db_path)
    store.create_run(run_id, {"profile": "cpu"})
    store.start_iteration(run_id, 0, policy_version=0)
    store.add_event(Event("phase", str(Phase.SYNTHESIZE), run_id, {"iteration": 0}))
    consumer = ControlConsumer(store, run_id)
    deadline = time.monotonic() + timeout_s
    moved = False
    while time.monotonic() < deadline:
        consumer.poll_once()
        if not moved and Path(go_file).exists():
            store.set_iteration_phase(run_id, 0, Phase.VALIDATE)
            store.add_event(Event("phase", str(Phase.VALIDATE), run_id, {"iteration": 0}))
            moved = True
        time.sleep(0.1)


if __name__ == "__main__":
    run_fake_appliance(*sys.argv[1:4])
