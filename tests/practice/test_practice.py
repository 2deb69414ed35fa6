"""One rollout end to end: task -> sandbox -> harness -> (proxy -> engine) -> verifier -> outcome -> samples."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from appliance.practice import Practice, new_rollout, run_rollout
from appliance.sandbox import podman_env
from appliance.schemas import Outcome
from appliance.tasks import TaskSpec
from appliance.testing import ScriptedPolicy

pytestmark = pytest.mark.slow

HELLO = TaskSpec(id="hello-1", family="files", difficulty=1, instruction="Create hello.txt containing the word hi.",
                 verify="grep -qx hi hello.txt", solution="echo hi > hello.txt")
GUARDED = TaskSpec(id="guarded-1", family="pyfix", difficulty=1,
                   instruction="Make test.sh pass by writing 42 into answer.txt.",
                   files={"test.sh": "test \"$(cat answer.txt)\" = 42\n"}, protected=["test.sh"],
                   verify="bash test.sh", solution="echo 42 > answer.txt")


# `practice`: tests/practice/conftest.py


def _run(practice: Practice, spec: TaskSpec, script: list) -> tuple:
    policy = ScriptedPolicy(script)
    practice.client_transport = policy.transport
    rollout = new_rollout(practice.store, harness="builtin", policy_version=0, group_id="g")
    return run_rollout(practice, spec, rollout), policy


def test_a_correct_answer_succeeds(practice: Practice) -> None:
    result, policy = _run(practice, HELLO, ["```bash\necho hi > hello.txt\n```", "DONE"])
    policy.assert_done()
    r = result.rollout
    assert (r.outcome, r.reward, r.turns) == (Outcome.SUCCESS, 1.0, 2), r.error


def test_evaluation_rollouts_sample_at_the_evaluation_temperature_and_practice_at_the_harness_one(
        practice: Practice) -> None:
    practice.settings.evaluation.temperature = 0.2
    temperatures = {}
    for purpose in ("eval", "train"):
        policy = ScriptedPolicy(["```bash\necho hi > hello.txt\n```", "DONE"])
        practice.client_transport = policy.transport
        rollout = new_rollout(practice.store, harness="builtin", policy_version=0, group_id=None, purpose=purpose)
        assert run_rollout(practice, HELLO, rollout).rollout.outcome == Outcome.SUCCESS
        temperatures[purpose] = {r["temperature"] for r in policy.requests}
    assert temperatures == {"eval": {0.2}, "train": {practice.settings.harness.temperature}}


def test_a_wrong_answer_fails_with_its_mode(practice: Practice) -> None:
    result, _ = _run(practice, HELLO, ["```bash\necho bye > hello.txt\n```", "DONE"])
    assert result.rollout.outcome == Outcome.FAILURE
    assert result.rollout.error.startswith("wrong_answer")


def test_editing_the_tests_does_not_help(practice: Practice) -> None:
    result, _ = _run(practice, GUARDED, ["```bash\necho 'exit 0' > test.sh\n```", "DONE"])
    r = result.rollout
    assert r.outcome == Outcome.FAILURE and result.tampered == ["test.sh"]
    assert "tampered with test.sh" in r.error
    ok, _ = _run(practice, GUARDED, ["```bash\necho 42 > answer.txt\n```", "DONE"])
    assert ok.rollout.outcome == Outcome.SUCCESS


def test_turn_limit_is_truncated(practice: Practice) -> None:
    spec = TaskSpec(**{**HELLO.to_spec(), "limits": {"max_turns": 2, "timeout_s": 30}})
    spec = TaskSpec.from_spec(spec.to_spec() | {"limits": {"max_turns": 2, "timeout_s": 30}})
    result, _ = _run(practice, spec, ["```bash\nls\n```", "```bash\npwd\n```"])
    assert result.rollout.outcome == Outcome.TRUNCATED and result.rollout.error.startswith("turn_limit")


def test_a_killed_sandbox_is_an_infra_error(practice: Practice) -> None:
    settings = practice.settings

    def kill_soon() -> None:
        for _ in range(100):
            out = subprocess.run(["podman", "ps", "-q", "--filter", "label=appliance.rollout"],
                                 capture_output=True, text=True, env=podman_env(settings)).stdout.split()
            if out:
                time.sleep(1.0)
                subprocess.run(["podman", "rm", "-f", "-t", "0", *out], capture_output=True, env=podman_env(settings))
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    result, _ = _run(practice, HELLO, ["```bash\nsleep 25\n```", "DONE"])
    killer.join()
    r = result.rollout
    assert r.outcome == Outcome.INFRA_ERROR and r.error.startswith("infra:"), r.error
    assert practice.store.samples(r.id) == []


def test_a_sandbox_swept_by_the_shutdown_is_no_outcome(practice: Practice) -> None:
    """SIGTERM sets `stopping`, then the teardown sweeps the sandbox: the rollout goes back to pending."""
    from appliance.errors import Interrupted
    from appliance.schemas import RolloutStatus

    settings = practice.settings

    def shut_down_soon() -> None:
        for _ in range(100):
            out = subprocess.run(["podman", "ps", "-q", "--filter", "label=appliance.rollout"],
                                 capture_output=True, text=True, env=podman_env(settings)).stdout.split()
            if out:
                time.sleep(1.0)
                practice.stopping.set()
                subprocess.run(["podman", "rm", "-f", "-t", "0", *out], capture_output=True, env=podman_env(settings))
                return
            time.sleep(0.2)

    stopper = threading.Thread(target=shut_down_soon)
    stopper.start()
    policy = ScriptedPolicy(["```bash\nsleep 25\n```", "DONE"])
    practice.client_transport = policy.transport
    rollout = new_rollout(practice.store, harness="builtin", policy_version=0, group_id="g")
    with pytest.raises(Interrupted):
        run_rollout(practice, HELLO, rollout)
    stopper.join()
    r = practice.store.get_rollout(rollout.id)
    assert (r.status, r.outcome) == (RolloutStatus.PENDING, None)
    assert practice.store.model_calls(r.id) == [] and practice.store.samples(r.id) == []

    # once stopping, nothing new starts
    with pytest.raises(Interrupted):
        run_rollout(practice, HELLO, rollout)
    assert practice.store.get_rollout(rollout.id).status == RolloutStatus.PENDING


def test_an_engine_error_row_makes_the_rollout_an_infra_error(practice: Practice) -> None:
    """The harness carried on after the engine failed one call: the episode is not the policy's."""
    from appliance.schemas import ModelCall

    policy = ScriptedPolicy(["```bash\necho hi > hello.txt\n```", "DONE"])
    practice.client_transport = policy.transport
    rollout = new_rollout(practice.store, harness="builtin", policy_version=0, group_id="g")
    practice.store.add_model_call(ModelCall(None, rollout.id, -1, "error", {}, None, [1, 2], [], [], 0, 0.1,
                                            "engine answered 500: the engine died"))
    r = run_rollout(practice, HELLO, rollout).rollout
    assert r.outcome == Outcome.INFRA_ERROR and "the engine failed 1 model call" in r.error, r.error
    assert practice.store.samples(r.id) == []
