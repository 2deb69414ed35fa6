"""SIGTERM of a real `appliance run` in every phase, then `appliance run` again: each stop is clean (exit 0,
no rollout left running, no sandbox or engine left), and the restarted run completes with nothing lost or
duplicated (tests/faults/live_run.py's invariants, and each practice group of its full size)."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.sandbox import podman_env
from appliance.schemas import RolloutStatus
from appliance.store import Store
from faults.live_run import MOMENTS, LiveRun, check_consistent

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


def _terminate_and_restart(run: LiveRun) -> None:
    assert run.proc is not None
    run.proc.send_signal(signal.SIGTERM)
    code = run.proc.wait(timeout=300)  # the phase's grace, then the engine's and the sandboxes' teardown
    assert code == 0, f"a SIGTERM ended `appliance run` with {code}:\n{run.tail()}"
    settings = run.settings
    store = Store(settings.db_path)
    try:
        running = store.rollouts(status=RolloutStatus.RUNNING)
        assert running == [], f"a clean stop left rollouts running: {[r.id for r in running]}"
    finally:
        store.close()
    left = subprocess.run(["podman", "ps", "-aq", "--filter", "label=appliance.sandbox"], capture_output=True,
                          text=True, env=podman_env(settings)).stdout.split()
    assert left == [], f"a clean stop left sandboxes: {left}"
    engines = subprocess.run(["pgrep", "-f", f"--port {run.env['APPLIANCE_ENGINE__PORT']}"], capture_output=True,
                             text=True).stdout.strip()
    assert engines == "", f"a clean stop left the engine: {engines}"
    run.start()


@pytest.mark.timeout(3600)  # up to nine engine starts on two loaded cores
def test_sigterm_in_every_phase_then_run_again_completes(sandbox_settings: Settings, tiny_model: Path,
                                                         tmp_path: Path) -> None:
    run = LiveRun.create(sandbox_settings, tmp_path / "home", tiny_model, tmp_path / "run.log")
    settings = run.settings
    run.start()
    try:
        code = run.drive([(name, _terminate_and_restart) for name in MOMENTS], deadline_s=3300)
        assert code == 0, run.tail()
    finally:
        run.stop()
    assert len(run.injected) >= 5, f"stopped only at {run.injected}; log:\n{run.tail()}"

    store = check_consistent(settings, run.env)
    try:
        run_id = store.latest_run().id
        practice = store.rollouts(run_id, iteration=1, purpose="train")
        sizes = Counter(r.group_id for r in practice)
        assert sizes and set(sizes.values()) == {settings.loop.group_size}, sizes  # none lost, none run twice
        assert "Traceback" not in run.log.read_text(errors="replace")  # every stop was a clean one
    finally:
        store.close()
