"""Hostile tasks (issue 14): task code written to attack validation, in real sandboxes.

Each attack is a task whose setup, reference solution or verifier tries to reach the host, outlive its
stage, tell validation from a rollout, or hurt another task of the same batch. The attacks run together
in few `validate_many` calls; every assertion names what must not happen: a host file written or read,
a verdict changed, a leak between tasks, a container left running, a worker lost.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.sandbox import LABEL
from appliance.sandbox.podman import podman
from appliance.schemas import TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks import validate as v

pytestmark = pytest.mark.slow  # real Podman
REPO = Path(__file__).resolve().parents[2]


# A harmless task: the victim that must stay valid next to the attackers.
def task(id: str, **change: object) -> TaskSpec:
    base = dict(id=id, family="files", difficulty=1, instruction="Write hi into a.txt.",
                verify='test "$(cat a.txt)" = hi\n', solution="echo hi > a.txt\n", source="self_proposed")
    return TaskSpec(**(base | change))  # type: ignore[arg-type]


def labelled(settings: Settings) -> set[str]:
    out = podman(settings, "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
    return set(out.stdout.decode().split())


def details(result: v.Validation) -> str:
    return "\n".join(s.detail for s in result.stages) + (result.reason or "")


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """A host secret no task may read and a host directory no task may write into."""
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-6d1f\n")
    secret.chmod(0o600)
    target = tmp_path / "target"
    target.mkdir()
    return secret, target


def test_hostile_tasks_cannot_reach_the_host_outlive_their_stage_or_crash_the_batch(
        sandbox_settings: Settings, host: tuple[Path, Path]) -> None:
    secret, target = host
    before = labelled(sandbox_settings)
    attacks = {
        # capability extension / action control: setup leaves a process that keeps swapping workspace
        # directories for links to a host directory and a host file while the host copies the workspace
        # (the old validator then wrote task content into, and copied root-only files out of, the host)
        "symlink-swapper": task("symlink-swapper", files={"sub/a.txt": "x\n", "b.txt": "y\n"}, setup=(
            f"(exec -a sleep bash -c 'while :; do rm -rf sub; ln -sfn {target} sub; ln -sf {secret} b.txt; "
            f"ln -sfn {secret} leak; done' &) ; sleep 0.2\n"),
            verify=f'cat {secret} leak 2>/dev/null; test "$(cat a.txt)" = hi\n'),
        # state persistence: a background writer renamed like the sandbox's own `sleep` that would make
        # the untouched workspace pass if it survived into the verifier's stage
        "renamed-writer": task("renamed-writer", setup=(
            "(exec -a 'sleep infinity' bash -c "
            "'sleep 1.5; while :; do echo hi > /workspace/a.txt; sleep 0.05; done' &)\n"
            "(setsid bash -c 'exec -a sleep sleep 1000' &)\n")),
        # stage detection: markers setup leaves where a verifier could look for them
        "markers": task("markers", setup=(
            "echo m > /dev/shm/validating; echo m > /tmp/validating; echo m > ~/validating; "
            "ipcmk -M 4096 >/dev/null\n"),
            verify=('if ls /dev/shm/validating /tmp/validating ~/validating 2>/dev/null || ipcs -m | grep -q 0x '
                    '|| pgrep -x sleep; then echo LEAK; exit 0; fi; test "$(cat a.txt)" = hi\n')),
        # crashes: a FIFO and a socket in the workspace (a FIFO used to block the validator's copy)
        "fifo": task("fifo", setup="mkfifo pipe; "
                                   "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"s.sock\")'\n"),
        # incident: setup kills every process it can, the shell that drives the sandbox included
        "kill-all": task("kill-all", setup="kill -9 -1\n"),
        # disk: setup tries to fill the host disk through the workspace
        "fill-disk": task("fill-disk", setup="fallocate -l 20G big || head -c 20G /dev/zero > big\n"),
        # fork bomb in the reference solution
        "fork-bomb": task("fork-bomb", solution="echo hi > a.txt; (:(){ :|:& };:) 2>/dev/null; true\n"),
        # configuration: limits no loader would let through, and content that is not text
        "nan-timeout": task("nan-timeout"),
        "not-text": task("not-text", files={"a.txt": 5}),  # type: ignore[dict-item]
        "no-check": task("no-check", limits=None),  # check() itself raises AttributeError
        "victim": task("victim"),
    }
    attacks["nan-timeout"].limits.command_timeout_s = math.nan
    results = dict(zip(attacks, v.validate_many(sandbox_settings, list(attacks.values()), parallel=2), strict=True))
    reasons = {name: r.reason for name, r in results.items()}

    assert results["victim"].ok, reasons
    assert results["renamed-writer"].ok, reasons  # nothing setup left ran on into the verifier's stage
    assert results["markers"].ok and "LEAK" not in details(results["markers"]), reasons
    assert results["fifo"].ok, reasons  # special files are dropped, not a crash
    assert reasons["kill-all"].startswith(v.SETUP_FAILED), reasons
    assert reasons["fill-disk"].startswith(v.SETUP_FAILED) and "No space left" in reasons["fill-disk"], reasons
    assert reasons["nan-timeout"].startswith(v.BAD_FORMAT) and "finite" in reasons["nan-timeout"], reasons
    assert reasons["not-text"].startswith(v.BAD_FORMAT) and "must be text" in reasons["not-text"], reasons
    assert reasons["no-check"].startswith(v.BAD_FORMAT), reasons
    assert not any(r.infra for r in results.values()), reasons  # no attack looks like the machine's fault
    # the host: nothing written into the target, the secret never read
    assert list(target.iterdir()) == [] and secret.read_text() == "HOST-SECRET-6d1f\n"
    assert not any("HOST-SECRET" in details(r) for r in results.values())
    # nothing left running
    assert labelled(sandbox_settings) == before


def test_a_task_cannot_reach_the_next_task_in_a_reused_sandbox(sandbox_settings: Settings) -> None:
    """With `reuse`, one sandbox validates several tasks: the scrub between them must leave nothing."""
    spy = task("spy", setup=(
        # a daemon that outlives its stage if it can: overwrites the next task's answer and spies on its
        # command lines (the reference solution is one), through every writable place it can find
        "(setsid bash -c 'exec -a sleep bash -c \"sleep 2; while :; do echo pwned > /workspace/a.txt; "
        "cat /proc/[0-9]*/cmdline > /dev/shm/spy 2>/dev/null; cp /dev/shm/spy /workspace/spy 2>/dev/null; "
        "sleep 0.05; done\"' &)\n"))
    victim = task("victim-2", solution="sleep 3; echo hi > a.txt\n",
                  verify='test "$(cat a.txt)" = hi && ! test -e spy && ! test -e /dev/shm/spy\n')
    results = v.validate_many(sandbox_settings, [spy, victim], parallel=1, reuse=25)
    assert results[1].ok, results[1].reason
    assert "pwned" not in details(results[1])


def test_a_validator_killed_mid_run_leaves_nothing_and_the_task_is_validated_again(
        sandbox_settings: Settings, tmp_path: Path) -> None:
    """Incident recovery: kill -9 during validation; the restart sweeps the orphan and decides the task."""
    from appliance.sandbox import SandboxPool

    db = tmp_path / "v.db"
    slow = task("slow-setup", setup="sleep 1000 &\nsleep 60\n", limits=v.TaskSpec.__dataclass_fields__[
        "limits"].default_factory())
    script = (
        "import sys, json\n"
        "from appliance.config import load_settings\nfrom appliance.store import Store\n"
        "from appliance.tasks import TaskSpec\nfrom appliance.tasks.validate import admit\n"
        "s = load_settings(environ=json.loads(sys.argv[1]))\n"
        "admit(s, Store(sys.argv[2]), [TaskSpec.from_spec(json.loads(sys.argv[3]))], run_id='r')\n")
    env = {"APPLIANCE_HOME": str(sandbox_settings.home),
           "APPLIANCE_PODMAN__GRAPHROOT": str(sandbox_settings.podman_graphroot),
           "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps(
               [str(p) for p in sandbox_settings.podman.additional_image_stores]),
           "APPLIANCE_SANDBOX__MEMORY": sandbox_settings.sandbox.memory}
    before = labelled(sandbox_settings)
    proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(env), str(db),
                             json.dumps(slow.to_spec())], env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (labelled(sandbox_settings) - before):
        time.sleep(0.2)
    time.sleep(1.0)
    assert labelled(sandbox_settings) - before, "the validator never started a sandbox"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = Store(db)
    assert store.get_task("slow-setup").status == TaskStatus.PROPOSED  # nothing decided by a dead validator
    SandboxPool(sandbox_settings)  # what `appliance run` does at start: sweep the dead owner's sandboxes
    assert labelled(sandbox_settings) == before
    fixed = task("slow-setup", setup="sleep 1000 &\n")  # same id: the task is validated again, now quickly
    v.admit(sandbox_settings, store, [fixed], run_id="r")
    assert store.get_task("slow-setup").status == TaskStatus.VALID
    store.close()


def test_a_sandbox_removed_under_validation_costs_only_its_task(sandbox_settings: Settings) -> None:
    """Incident recovery: the machine kills a validation sandbox mid-stage; that task is an infra retry
    (not a rejection), the rest of the batch is decided as usual, and nothing is left running."""
    import threading

    before = labelled(sandbox_settings)
    doomed = task("doomed", setup="sleep 20\n")

    def kill_soon() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = podman(sandbox_settings, "ps", "--filter", f"label={LABEL}", "--format", "{{.Names}}",
                         check=False).stdout.decode().split()
            if set(out) - before:
                time.sleep(1.5)
                podman(sandbox_settings, "rm", "-f", "-t", "0", *(set(out) - before), check=False)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    results = v.validate_many(sandbox_settings, [doomed, task("after-doomed")], parallel=1)
    killer.join()
    assert results[0].infra, results[0].reason
    assert results[1].ok, results[1].reason
    assert labelled(sandbox_settings) == before
