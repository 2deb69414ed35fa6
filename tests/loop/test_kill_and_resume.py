"""Kill `appliance run` with SIGKILL in every phase; the restarted run completes with consistent rows."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.sandbox import podman_env
from appliance.schemas import EngineState, IterationStatus, Phase, RolloutStatus, RunStatus
from appliance.store import Store
from small_run import REPO, small_run_env  # tests/small_run.py (tests/ is on sys.path: its conftest.py)

pytestmark = pytest.mark.slow

# The moments to kill at, in the order a run passes them: (label, predicate over the store).
MOMENTS = [
    ("baseline eval", lambda s, it: it and it.index == 0 and it.phase == Phase.EVALUATE and _running(s)),
    ("synthesis", lambda s, it: it and it.index == 1 and it.phase == Phase.SYNTHESIZE),
    ("validation", lambda s, it: it and it.index == 1 and it.phase == Phase.VALIDATE),
    ("rollouts", lambda s, it: it and it.index == 1 and it.phase == Phase.PRACTISE and _running(s)),
    ("training", lambda s, it: it and it.index == 1 and it.phase == Phase.TRAIN),
    ("sync", lambda s, it: it and it.index == 1 and s.engine_state()[0] in
     (EngineState.SYNCING, EngineState.WAKING, EngineState.CANARY)),
    ("eval", lambda s, it: it and it.index == 1 and it.phase == Phase.EVALUATE and _running(s)),
    ("diagnosis", lambda s, it: it and it.index == 1 and it.phase == Phase.DIAGNOSE),
]


def _running(store: Store) -> bool:
    return any(r.status == RolloutStatus.RUNNING for r in store.rollouts(status=RolloutStatus.RUNNING))


def _env(sandbox_settings: Settings, home: Path, tiny_model: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    return env | small_run_env(sandbox_settings, home, tiny_model)


def _start(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(REPO / ".venv/bin/appliance"), "run", "--iterations", "1", "--headless"],
                            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(2700)  # up to eight engine starts on two cores
def test_sigkill_in_every_phase_then_the_run_completes(sandbox_settings: Settings, tiny_model: Path,
                                                      tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(sandbox_settings, home, tiny_model)
    settings = load_settings(environ=env)
    log = tmp_path / "run.log"
    killed: list[str] = []
    proc = _start(env, log)
    deadline = time.monotonic() + 2400
    moments = list(MOMENTS)
    try:
        while moments and time.monotonic() < deadline:
            if proc.poll() is not None:
                break  # the run finished before the remaining moments came up
            if settings.db_path.exists():
                store = Store(settings.db_path)
                run = store.latest_run()
                its = store.iterations(run.id) if run else []
                it = next((i for i in its if i.status != IterationStatus.DONE), None)
                # the first moment that is due now; earlier ones that passed too quickly to catch are skipped
                due = next((i for i, (_, pred) in enumerate(moments) if pred(store, it)), None)
                if due is not None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    killed.append(moments[due][0])
                    del moments[: due + 1]
                    proc = _start(env, log)
                store.close()
            time.sleep(0.2)
        assert proc.wait(timeout=max(60, deadline - time.monotonic())) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(killed) >= 5, f"killed only at {killed}; log:\n{log.read_text()[-2000:]}"

    store = Store(settings.db_path)
    [run] = [store.latest_run()]
    assert run.status == RunStatus.DONE
    its = store.iterations(run.id)
    assert [(i.index, i.status) for i in its] == [(0, IterationStatus.DONE), (1, IterationStatus.DONE)]
    rollouts = store.rollouts(run.id)
    assert rollouts and all(r.status == RolloutStatus.FINISHED for r in rollouts)
    for r in rollouts:  # no call recorded twice, none left from an interrupted attempt
        seqs = [c.seq for c in store.model_calls(r.id)]
        assert seqs == list(range(len(seqs)))
    assert {e["iteration"] for e in store.evals(run.id)} == {0, 1}
    assert store.report(run.id, 0) and store.report(run.id, 1)
    assert len([c for c in store.checkpoints(run.id) if c.iteration == 1]) <= 1
    state, version, _ = store.engine_state()
    assert state == EngineState.STOPPED
    left = subprocess.run(["podman", "ps", "-aq", "--filter", "label=appliance.sandbox"], capture_output=True,
                          text=True, env=podman_env(settings)).stdout.split()
    assert left == []
    engines = subprocess.run(["pgrep", "-f", f"--port {env['APPLIANCE_ENGINE__PORT']}"], capture_output=True, text=True)
    assert engines.stdout.strip() == ""
