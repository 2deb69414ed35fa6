"""The vLLM engine killed or hung under a real `appliance run` (the tiny model, real sandboxes and trainer).

One run, four faults, each at its moment: SIGKILL of the engine's whole process group while the baseline
evaluation's and then practice's rollouts are talking to it, SIGKILL between the weight sync's start and
the end of its canary, and SIGSTOP of the EngineCore (the API process keeps answering /health) while the evaluation
after training is under way, never continued: a hang longer than any request timeout. The appliance must
restart the engine each time by itself, the rollouts in flight must end as infra errors (never in a loss,
a baseline or a pass@1), and the run must complete with nothing leaked.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.schemas import EngineState
from faults.live_run import LiveRun, check_consistent, signal_pids, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.chaos]  # scripts/chaos: too long for every CI run

HANG_TIMEOUT_S = 30  # engine.hang_timeout_s for this run: the probe's patience before a restart


def _kill_engine(run: LiveRun) -> None:
    pgid = run.engine_group()
    run.groups.append(pgid)
    signal_pids(run.engine_processes(pgid), signal.SIGKILL)


def _hang_engine_core(run: LiveRun) -> None:
    """Stop every process of the engine but its API server, which then still answers /health with 200."""
    pgid = run.engine_group()
    core = [pid for pid in run.engine_processes(pgid) if pid != pgid]
    assert core, "the engine has no EngineCore process to stop"
    run.groups.append(pgid)
    run.stopped += core
    signal_pids(core, signal.SIGSTOP)


EVERY_FAULT = [("baseline eval", _kill_engine), ("practice", _kill_engine), ("sync", _kill_engine),
               ("eval", _hang_engine_core)]


@pytest.mark.timeout(3000)  # five engine starts and a full iteration on two loaded cores
@pytest.mark.parametrize("faults", [
    pytest.param(EVERY_FAULT[1:2], id="killed-mid-practice"),  # `scripts/chaos engine-practice`: one restart
    pytest.param(EVERY_FAULT, id="every-fault"),  # `scripts/chaos engine`
])
def test_the_engine_killed_or_hung_in_each_phase_is_restarted_and_the_run_completes(
        sandbox_settings: Settings, tiny_model: Path, tmp_path: Path, faults) -> None:
    run = LiveRun.create(sandbox_settings, tmp_path / "home", tiny_model, tmp_path / "run.log",
                         APPLIANCE_ENGINE__HANG_TIMEOUT_S=str(HANG_TIMEOUT_S))
    settings = run.settings
    run.start()
    try:
        code = run.drive(faults, deadline_s=2700)
        assert code == 0, run.tail()
    finally:
        run.stop()
    assert len(run.injected) >= min(3, len(faults)), f"faults injected only at {run.injected}; log:\n{run.tail()}"

    store = check_consistent(settings, run.env)
    try:
        # every process of every engine this run started is gone, the stopped core included
        assert wait_for(lambda: not any(run.engine_processes(g) for g in run.groups), 30), run.groups
        run_id = store.latest_run().id
        events = [e.message for e in store.events(run_id, limit=100000)]
        died = [m for m in events if m.startswith("the engine process died (")]
        hung = [m for m in events if "generated nothing" in m]
        expected_died = sum(n in run.injected for n in ("baseline eval", "practice"))
        assert len(died) >= expected_died, events
        if "eval" in run.injected:
            assert hung, events
        if "sync" in run.injected:
            # killed before its reload: the sync starts the engine on the new weights and the canary checks
            # them; killed after it: the canary fails and the previous weights serve again (no new version)
            assert any("died during the weight sync" in m or "restoring the previous weights" in m
                       for m in events), events
        infra = [r for r in store.rollouts(run_id) if r.outcome == "infra_error"]
        assert infra, "no rollout was in flight at any fault"
        assert all(r.error and r.error.startswith("infra:") for r in infra)
        state, _, _ = store.engine_state()
        assert state == EngineState.STOPPED
    finally:
        store.close()

