"""Podman's storage out of space: its storage root on a small tmpfs holding a copy of the sandbox image,
filled by a file beside it.

No sandbox can start then. That is the machine's state, not one rollout's bad luck: a sandbox start must
say so at once (the disk, its free space, what to free) instead of retrying, no task may be decided and no
rollout finished as an infra error on it, and the run must stop with the cause after
`loop.phase_attempts` and finish once space is freed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.errors import SandboxError, SandboxStorageFull
from appliance.practice import Practice, new_rollout, run_rollouts
from appliance.sandbox import Sandbox, SandboxPool, podman_env
from appliance.sandbox.podman import remove_storage_root
from appliance.sandbox.sandbox import workspace_bytes
from appliance.schemas import Outcome, RolloutStatus, TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.validate import admit
from appliance.testing import ScriptedPolicy
from faults.live_run import LiveRun, check_consistent, fill_disk, own_image_root

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a size-limited tmpfs needs root")]

SIZE_MB = 500  # the sandbox image (~230 MB) and the containers of a small run


@pytest.fixture
def small_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A storage root of its own on a SIZE_MB tmpfs, with the sandbox image in it."""
    base = tmp_path_factory.mktemp("podman-full")
    (base / "st").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(base / "st")], check=True)
    try:
        own, _, _ = own_image_root(base)
        yield own
        remove_storage_root(own)
    finally:
        subprocess.run(["umount", "-l", str(base / "st")], check=False)


def _containers(settings: Settings) -> list[str]:
    return subprocess.run(["podman", "ps", "-aq"], capture_output=True, text=True, env=podman_env(settings),
                          timeout=120).stdout.split()


def test_a_sandbox_on_full_storage_says_which_disk_and_starts_once_it_is_freed(small_storage: Settings) -> None:
    running = Sandbox.start(small_storage)
    try:
        with pytest.raises(SandboxError) as workspace_full:  # the same words from a full workspace: not the storage
            running.put(b"x" * (workspace_bytes(small_storage) + 2**20), "/workspace/big")
        assert not isinstance(workspace_full.value, SandboxStorageFull)
        filler = fill_disk(small_storage.podman_graphroot)
        with pytest.raises(SandboxStorageFull) as caught:
            Sandbox.start(small_storage)
        assert str(small_storage.podman_graphroot) in caught.value.message and "MiB" in caught.value.message
        assert "free space on that disk" in caught.value.hint
        for step in (lambda: running.exec("true"), lambda: running.get_tar("/workspace")):  # one already running
            with pytest.raises(SandboxStorageFull):
                step()
        filler.unlink()
    finally:
        running.stop()
    assert _containers(small_storage) == []
    with Sandbox.start(small_storage) as sb:
        assert sb.exec("echo after").stdout.strip() == "after"
    assert _containers(small_storage) == []


def test_on_full_storage_no_rollout_is_finished_and_no_task_decided(small_storage: Settings, tmp_path: Path) -> None:
    spec = TaskSpec(id="hello-1", family="files", difficulty=1, instruction="Create hello.txt containing hi.",
                    verify="grep -qx hi hello.txt", solution="echo hi > hello.txt")
    store = Store(tmp_path / "p.db")
    try:
        practice = Practice(small_storage, store, "127.0.0.1", 9, SandboxPool(small_storage, 2, sweep_orphans=False))
        practice.client_transport = ScriptedPolicy(["DONE"]).transport
        filler = fill_disk(small_storage.podman_graphroot)
        rollouts = [new_rollout(store, harness="builtin", policy_version=0, group_id="g") for _ in range(3)]
        with pytest.raises(SandboxStorageFull):
            run_rollouts(practice, [(spec, r) for r in rollouts])
        assert [store.get_rollout(r.id).status for r in rollouts] == [RolloutStatus.PENDING] * 3  # to be run again
        with pytest.raises(SandboxStorageFull):
            admit(small_storage, store, [spec], run_id="r1")
        assert store.get_task(spec.id).status == TaskStatus.PROPOSED  # validated again once space is freed
        filler.unlink()
        assert [v.ok for _, v in admit(small_storage, store, [spec], run_id="r1")] == [True]
    finally:
        store.close()
    assert _containers(small_storage) == []


@pytest.mark.chaos  # scripts/chaos podman-storage-full: too long for every CI run
@pytest.mark.timeout(3000)
def test_a_full_podman_storage_stops_the_run_with_the_cause_and_it_resumes(small_storage: Settings, tiny_model: Path,
                                                                          tmp_path: Path) -> None:
    run = LiveRun.create(small_storage, small_storage.home, tiny_model, tmp_path / "run.log",
                         APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES="[]", APPLIANCE_LOOP__PHASE_ATTEMPTS="2")
    settings = run.settings
    filled: list[Path] = []
    run.start()
    try:  # filled while rollouts are under way: those in their sandboxes finish, no new one can start
        code = run.drive([("practice", lambda r: filled.append(fill_disk(settings.podman_graphroot)))],
                         deadline_s=2400)
        assert run.injected == ["practice"], f"the practice moment was missed:\n{run.tail()}"
        assert code == 1, f"the run did not stop on the full storage (exit {code}):\n{run.tail()}"
        log = run.tail(100_000)
        assert "Podman's storage" in log and "free space on that disk" in log and "Traceback" not in log, run.tail()
        filled[0].unlink()  # the operator's fix
        assert _containers(settings) == [], "sandboxes left after the stop"
        run.resume()
    finally:
        run.stop()
    store = check_consistent(settings, run.env)
    try:
        # the rollouts under way when the storage filled went back to pending and ran after the restart:
        # none of them is an infra error, whatever podman said on the full disk
        infra = [(r.id, r.error) for r in store.rollouts() if r.outcome == Outcome.INFRA_ERROR]
        assert infra == [], infra
    finally:
        store.close()
