"""Question tasks (issue 30): the agent says its answer instead of writing a file; the answer reaches the
verifier as the read-only file $ANSWER_FILE, through the built-in harness, the third-party adapter,
validation (the reference's standard output) and demonstrations."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import ExternalHarnessSettings, Settings
from appliance.harness.actions import final_answer
from appliance.harness.external import run_external
from appliance.practice import Practice, new_rollout, run_rollout
from appliance.sandbox import Sandbox, SandboxPool
from appliance.schemas import Outcome
from appliance.store import Store
from appliance.tasks import TaskSpec, validate_agent_free
from appliance.tasks.format import dumps_toml
from appliance.testing import ScriptedPolicy

VERIFY = ("import os, sys\n"
          "answer = open(os.environ['ANSWER_FILE']).read().strip()\n"
          "assert answer == '3', f'the answer should be 3, was {answer!r}'\n")
QUESTION = TaskSpec(id="question-1", family="text", difficulty=2, instruction="How many lines does notes.txt have?",
                    files={"notes.txt": "a\nb\nc\n"}, verify=VERIFY, verify_lang="python",
                    solution="wc -l < notes.txt\n", answer=True)


def test_the_answer_is_what_the_agent_said_without_done() -> None:
    assert final_answer({"role": "assistant", "content": "There are 3 lines.\nDONE"}) == "There are 3 lines."
    assert final_answer({"role": "assistant", "content": "```bash\nwc -l x\n```\n3\nDONE\n"}) == "3"
    assert final_answer({"role": "assistant", "content": "DONE"}) == ""
    assert "answer = true" in dumps_toml(QUESTION)


@pytest.mark.slow  # real Podman
def test_a_question_task_validates_and_is_solved_through_the_builtin_harness(sandbox_settings: Settings,
                                                                             tmp_path: Path) -> None:
    validation = validate_agent_free(sandbox_settings, QUESTION)
    assert validation.ok, validation.reason
    store = Store(tmp_path / "p.db")
    practice = Practice(sandbox_settings, store, "127.0.0.1", 9, SandboxPool(sandbox_settings, 1, sweep_orphans=False))
    try:
        for script, outcome in ((["```bash\nwc -l < notes.txt\n```", "3\nDONE"], Outcome.SUCCESS),
                                (["```bash\nwc -l < notes.txt\n```", "DONE"], Outcome.FAILURE),
                                (["4\nDONE"], Outcome.FAILURE)):
            policy = ScriptedPolicy(script)
            practice.client_transport = policy.transport
            r = run_rollout(practice, QUESTION, new_rollout(store, harness="builtin", policy_version=0, group_id="g"))
            assert r.rollout.outcome == outcome, (script, r.rollout.error, r.verifier_output)
        assert "on the line before DONE" in policy.requests[0]["messages"][1]["content"]
    finally:
        store.close()


@pytest.mark.slow  # real Podman
def test_the_third_party_adapter_reads_the_answer_the_harness_left(sandbox_settings: Settings) -> None:
    # a stand-in harness that leaves a trajectory the way mini-swe-agent does (info.submission)
    harness = ExternalHarnessSettings(recipe="mini-swe-agent", command=[
        "bash", "-c", "printf '{{\"info\": {{\"submission\": \"3\\\\n\"}}}}' > /tmp/trajectory.json"],
        answer="/tmp/trajectory.json:info.submission")
    with Sandbox.start(sandbox_settings) as sb:
        run = run_external(sb, harness, instruction="x", token="t")
        assert run.exit_code == 0 and run.answer == "3", run
        missing = run_external(sb, harness.model_copy(update={"answer": "/tmp/none.json:info.submission"}),
                               instruction="x", token="t")
        assert missing.answer == ""


@pytest.mark.slow  # real Podman
def test_a_question_tasks_demonstration_says_the_answer(sandbox_settings: Settings) -> None:
    from appliance.demonstrations import demonstrate

    run = demonstrate(sandbox_settings, QUESTION)
    assert run.passed, run
    assert run.messages[-1]["content"] == "3\nDONE"
