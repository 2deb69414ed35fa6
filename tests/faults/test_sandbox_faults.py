"""Podman failing under a real `appliance run`: a rollout's sandbox container killed mid-episode (in
practice, its conmon killed; in the evaluation after training, the container itself), then the sandbox
image deleted while the run waits at the end of its practice, so the evaluation's sandboxes cannot start.

Each killed sandbox's rollout must end as an infra error naming the sandbox (never as the agent's
failure), nothing may leak, and a missing image must stop the run with the cause (after
`loop.phase_attempts`) and `appliance run` must finish it once the image is back.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.sandbox import podman_env
from appliance.schemas import Outcome, RolloutStatus
from appliance.store import Store
from faults.live_run import LiveRun, check_consistent, own_image_root, signal_pids

pytestmark = [pytest.mark.slow, pytest.mark.chaos]  # scripts/chaos: too long for every CI run


def _podman(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(settings), timeout=120)


class SandboxKiller:
    """Kills the sandbox of a rollout that is talking to the engine; remembers which and when."""

    def __init__(self, how: str) -> None:
        self.how = how  # "conmon" or "container"
        self.hit: list[str] = []

    def __call__(self, run: LiveRun) -> None:
        settings = run.settings
        store = Store(settings.db_path)
        try:
            busy = [r.id for r in store.rollouts(status=RolloutStatus.RUNNING) if store.model_calls(r.id)]
        finally:
            store.close()
        for rollout_id in busy:
            names = _podman(settings, "ps", "-q", "--filter", f"label=appliance.rollout={rollout_id}").stdout.split()
            if not names:
                continue  # between its episode and its verdict: no agent sandbox to kill
            if self.how == "conmon":
                inspect = json.loads(_podman(settings, "inspect", names[0]).stdout)
                signal_pids([int(inspect[0]["State"]["ConmonPid"])], signal.SIGKILL)
            else:
                _podman(settings, "kill", "-s", "KILL", names[0])
            self.hit.append(rollout_id)
            return


@pytest.mark.timeout(3000)
def test_killed_sandboxes_are_infra_errors_and_nothing_leaks(sandbox_settings: Settings, tiny_model: Path,
                                                            tmp_path: Path) -> None:
    conmon, container = SandboxKiller("conmon"), SandboxKiller("container")
    run = LiveRun.create(sandbox_settings, tmp_path / "home", tiny_model, tmp_path / "run.log")
    settings = run.settings
    run.start()
    try:
        code = run.drive([("baseline eval", container), ("practice", conmon), ("eval", container)], deadline_s=2700)
        assert code == 0, run.tail()
    finally:
        run.stop()
    hits = conmon.hit + container.hit
    assert hits, f"no sandbox was killed (moments: {run.injected}); log:\n{run.tail()}"

    store = check_consistent(settings, run.env)
    try:
        for rollout_id in hits:
            r = store.get_rollout(rollout_id)
            if r.outcome == Outcome.INFRA_ERROR:
                assert r.error and "sandbox" in r.error.lower(), r.error
            else:  # unharmed (conmon's death need not stop the container), or redrawn by a later attempt:
                # either way never blamed on the agent
                assert not any(w in (r.error or "") for w in ("tamper", "could not be judged", "outlived")), r.error
        assert any(store.get_rollout(rid).outcome == Outcome.INFRA_ERROR for rid in container.hit) or \
            all(store.get_rollout(rid).purpose == "eval" for rid in container.hit), container.hit
        judged = [r for r in store.rollouts() if r.error and "could not be judged" in r.error]
        assert judged == [], [(r.id, r.error) for r in judged]  # a killed sandbox is never the agent's failure
    finally:
        store.close()


@pytest.mark.timeout(3000)
def test_a_deleted_sandbox_image_stops_the_run_with_the_cause_and_it_resumes(
        tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, tmp_path: Path) -> None:
    """The run's own storage root holds its own copy of the image (the shared one must never be touched)."""
    from appliance.sandbox.podman import remove_storage_root

    base = tmp_path_factory.mktemp("own-image")
    own, ref, archive = own_image_root(base)
    try:
        run = LiveRun.create(own, base / "home", tiny_model, tmp_path / "run.log",
                             APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES="[]", APPLIANCE_LOOP__PHASE_ATTEMPTS="2")
        settings = run.settings

        def delete_image(r: LiveRun) -> None:
            assert _podman(own, "rmi", "-f", ref).returncode == 0

        run.start()
        try:
            code = run.drive([("training", delete_image)], deadline_s=2400)
            assert code == 1, f"the run did not fail on the missing image (exit {code}):\n{run.tail()}"
            assert "sandbox image" in run.tail() and "appliance init" in run.tail(), run.tail()
            left = _podman(own, "ps", "-aq", "--filter", "label=appliance.sandbox").stdout.split()
            assert left == []
            assert _podman(own, "load", "-i", str(archive)).returncode == 0  # the operator's fix
            run.resume()
        finally:
            run.stop()
        store = check_consistent(settings, run.env)
        store.close()
    finally:
        remove_storage_root(own)
