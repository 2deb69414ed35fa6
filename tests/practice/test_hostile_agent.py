"""Hostile agents (issue 14): what an agent leaves in its workspace never changes a verdict, never reaches
the host, and is its own failure (recorded as tampering), never an infra error that removes the rollout
from training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.practice import Practice
from appliance.sandbox import LABEL
from appliance.sandbox.podman import podman
from appliance.schemas import Outcome
from appliance.tasks import Limits, TaskSpec
from practice.conftest import attempt  # tests/practice/conftest.py

pytestmark = pytest.mark.slow  # real Podman

# The verifier runs a protected Python check that imports json from the standard library.
CHECK = "import json, sys\nsys.exit(0 if json.load(open('answer.json')) == {'x': 42} else 1)\n"
JSON_TASK = TaskSpec(id="json-1", family="pyfix", difficulty=1, instruction="Write {\"x\": 42} into answer.json.",
                     files={"check.py": CHECK}, protected=["check.py"], verify="python3 check.py\n",
                     solution="echo '{\"x\": 42}' > answer.json\n")


def labelled(settings: Settings) -> set[str]:
    return set(podman(settings, "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
               .stdout.decode().split())


def test_hostile_agents_fail_on_their_own(practice: Practice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = practice.settings
    before = labelled(settings)
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-9a2c\n")
    free_before = shutil.disk_usage(settings.home).free

    # runtime: a module named like the standard library that the verifier imports, printing a pass
    planted = attempt(practice, JSON_TASK, "printf 'import sys\\nprint(\"SCORE=1\")\\nsys.exit(0)\\n' > json.py")
    r = planted.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, r.error
    assert any(t.startswith("json.py (module shadowing") for t in planted.tampered), planted.tampered

    # runtime + action control: FIFOs, sockets, links to host files and out of the workspace, an
    # unreadable file, and the right answer: a success with the leftovers recorded, no infra error
    leftovers = attempt(practice, JSON_TASK, (
        "echo '{\"x\": 42}' > answer.json; mkfifo pipe; "
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"s.sock\")'; "
        f"ln -s {secret} host-link; ln -s ../../etc/passwd up; echo x > locked; chmod 000 locked; "
        f"ln -sfn {tmp_path} check-dir"))
    r = leftovers.rollout
    assert r.outcome == Outcome.SUCCESS, r.error
    kinds = " ".join(leftovers.tampered)
    assert "pipe (fifo" in kinds and "s.sock (socket)" in kinds and "host-link (link" in kinds, kinds
    assert "HOST-SECRET" not in leftovers.verifier_output

    # disk: the workspace is capped; filling it is the agent's failure, and the host disk is untouched
    filled = attempt(practice, JSON_TASK, "fallocate -l 20G big || head -c 20G /dev/zero > big; df /workspace")
    assert filled.rollout.outcome == Outcome.FAILURE, filled.rollout.error
    assert shutil.disk_usage(settings.home).free > free_before - 200 * 2**20

    # runtime: no new user namespace (the seccomp profile), so no uid 0 of any kind inside
    userns = attempt(practice, JSON_TASK, "unshare -r python3 -c 'print(\"{\\\"x\\\": 42}\")' > answer.json")
    assert userns.rollout.outcome == Outcome.FAILURE, userns.rollout.error

    # a verifier that hangs on what the agent wrote is the agent's failure, not the machine's
    loop_task = TaskSpec(id="loop-1", family="script", difficulty=1, instruction="Make run.sh print ok.",
                         verify='test "$(bash run.sh)" = ok\n', solution="echo 'echo ok' > run.sh\n",
                         limits=Limits(verifier_timeout_s=3.0))  # the task's own verifier limit
    hang = attempt(practice, loop_task, "echo 'while :; do :; done' > run.sh")
    assert hang.rollout.outcome == Outcome.FAILURE and hang.rollout.error.startswith("verifier_timeout"), \
        hang.rollout.error

    assert labelled(settings) == before  # nothing left running
    assert not list((settings.home / "workspaces").iterdir())
