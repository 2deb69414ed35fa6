"""The built-in harness against a scripted policy and a fake shell: the loop, its limits, its failures."""

from __future__ import annotations

import httpx
import pytest

from appliance.errors import SandboxError
from appliance.harness.base import ClientConfig, EndReason, Limits
from appliance.harness.builtin import REPEAT_NOTE, run_builtin
from appliance.testing import FakeClock, FakeResult, FakeShell, Reply, ScriptDivergence, ScriptedPolicy
from appliance.trajectories import build_samples

TASK = "Write the number of lines of data.txt into count.txt."


def run(policy: ScriptedPolicy, shell: FakeShell, limits: Limits | None = None, clock: FakeClock | None = None,
        **client):
    clock = clock or FakeClock()
    return run_builtin(TASK, shell, policy.client_config(**client), limits, sleep=clock.sleep, clock=clock)


def test_multi_turn_episode_submits_and_rebuilds_into_one_sample():
    policy = ScriptedPolicy([
        "Let me count.\n```bash\nwc -l < data.txt > count.txt\n```",
        Reply("```bash\ncat count.txt\n```", expect="exit code 0\n(no output)"),
        Reply("The file holds 42.\n\nDONE", expect="42"),
    ])
    shell = FakeShell({"wc -l < data.txt > count.txt": "", "cat count.txt": "42\n"})
    episode = run(policy, shell)
    policy.assert_done()
    assert episode.end_reason == EndReason.SUBMITTED and not episode.infra_error
    assert (episode.turns, episode.commands, episode.parse_errors) == (3, 2, 0)
    assert shell.commands == ["wc -l < data.txt > count.txt", "cat count.txt"]
    assert episode.messages[1]["content"] == f"Task: {TASK}"
    assert "```bash" in episode.messages[0]["content"] and "DONE" in episode.messages[0]["content"]
    assert episode.completion_tokens == sum(len(c.completion_ids) for c in policy.calls)
    # the harness sent every answer back verbatim, so the calls merge into one training sequence
    samples, report = build_samples(policy.calls, rollout_id="scripted", group_id="g")
    assert report.branches == 1 and report.divergences == [] and len(samples) == 1
    assert [t for t, m in zip(samples[0].token_ids, samples[0].mask) if m] == [
        t for c in policy.calls for t in c.completion_ids]


def test_native_tool_calls_get_tool_messages_and_still_merge():
    policy = ScriptedPolicy([
        Reply(tool_calls=[("bash", {"command": "ls"}), ("bash", {"command": "pwd"})]),
        Reply(tool_calls=[("submit", {})], expect="a.txt"),
    ])
    episode = run(policy, FakeShell({"ls": "a.txt\n"}), native_tools=True)
    policy.assert_done()
    assert episode.end_reason == EndReason.SUBMITTED and episode.commands == 1
    assert [t["function"]["name"] for t in policy.requests[0]["tools"]] == ["bash", "submit"]
    tool_messages = [m for m in episode.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0_0", "call_0_1"]
    assert "one command per turn" in tool_messages[1]["content"]
    assert build_samples(policy.calls, rollout_id="scripted", group_id=None)[1].branches == 1


def test_an_answer_without_a_command_is_fed_back():
    policy = ScriptedPolicy([
        "You can count lines with wc.",
        Reply("```bash\nsudo wc -l data.txt\n```", expect="No command found"),
        Reply("DONE", expect="3 data.txt"),
    ])
    shell = FakeShell({"wc -l data.txt": "3 data.txt\n"})
    episode = run(policy, shell)
    policy.assert_done()
    assert episode.end_reason == EndReason.SUBMITTED and episode.parse_errors == 1
    assert shell.commands == ["wc -l data.txt"]


def test_command_then_done_runs_the_command_and_ends():
    policy = ScriptedPolicy(["```bash\necho 42 > count.txt\n```\nDONE"])
    shell = FakeShell({"echo 42 > count.txt": ""})
    episode = run(policy, shell)
    policy.assert_done()
    assert episode.end_reason == EndReason.SUBMITTED and shell.commands == ["echo 42 > count.txt"]


def test_turn_limit():
    policy = ScriptedPolicy(["```bash\nls\n```", "```bash\nls\n```"])
    episode = run(policy, FakeShell(default=FakeResult(0, "x")), Limits(max_turns=2))
    policy.assert_done()
    assert episode.end_reason == EndReason.TURN_LIMIT and episode.turns == 2


def test_a_turn_repeated_to_the_same_exit_code_ends_the_episode_as_repeating():
    # the base model's loop, seen in a baseline evaluation: the same command failing the same way, turn after turn
    loop = "You:\n```bash\ncd /var/log/your-server-path\n```\n"
    policy = ScriptedPolicy([loop, loop, loop])
    shell = FakeShell(default=FakeResult(1, "", "cd: /var/log/your-server-path: No such file or directory"))
    episode = run(policy, shell, Limits(max_turns=8, max_repeats=2))
    policy.assert_done()
    assert episode.end_reason == EndReason.REPEATING and episode.turns == 3 and episode.commands == 3
    assert "3 turns in a row" in (episode.error or "")


def test_a_repeat_that_changes_something_or_a_retry_after_a_change_goes_on():
    # the same command with another exit code is news (the file appeared); another command between resets
    policy = ScriptedPolicy(["```bash\ncat n.txt\n```", "```bash\ncat n.txt\n```", "```bash\nls\n```",
                             "```bash\ncat n.txt\n```", "```bash\ncat n.txt\n```", "DONE"])
    codes = iter([1, 0, 0, 0])
    shell = FakeShell({"cat n.txt": lambda _: FakeResult(next(codes), "3"), "ls": "n.txt"})
    episode = run(policy, shell, Limits(max_turns=8, max_repeats=2))
    policy.assert_done()
    assert episode.end_reason == EndReason.SUBMITTED and episode.commands == 5


def test_a_repeated_failing_command_is_told_so_when_the_note_is_on_and_a_repeated_success_never():
    fail = "```bash\ncd nowhere\n```"
    policy = ScriptedPolicy([fail, Reply(fail, expect="No such file"), Reply("```bash\nls\n```", expect=REPEAT_NOTE),
                             Reply("```bash\nls\n```", expect="a.txt"), Reply("DONE", expect="a.txt")])
    shell = FakeShell({"ls": "a.txt"}, default=FakeResult(1, "", "cd: nowhere: No such file or directory"))
    episode = run(policy, shell, Limits(max_turns=8, max_repeats=2, repeat_note=True))
    policy.assert_done()
    said = [m["content"] for m in episode.messages if m["role"] == "user"][1:]
    assert [REPEAT_NOTE in s for s in said] == [False, True, False, False]
    assert episode.end_reason == EndReason.SUBMITTED
    # off (the default), the observation is the command's output only
    policy = ScriptedPolicy([fail, fail, "DONE"])
    episode = run(policy, FakeShell(default=FakeResult(1, "", "no")), Limits(max_turns=8, max_repeats=2))
    assert not any(REPEAT_NOTE in str(m["content"]) for m in episode.messages)


def test_replies_without_a_command_repeated_end_too_and_zero_turns_the_rule_off():
    policy = ScriptedPolicy(["I cannot do that."] * 3)
    episode = run(policy, FakeShell(), Limits(max_turns=8, max_repeats=2))
    assert episode.end_reason == EndReason.REPEATING and episode.parse_errors == 2
    policy = ScriptedPolicy(["I cannot do that."] * 4)
    episode = run(policy, FakeShell(), Limits(max_turns=4, max_repeats=0))
    policy.assert_done()
    assert episode.end_reason == EndReason.TURN_LIMIT and episode.parse_errors == 4


def test_token_limit_clips_max_tokens_then_ends():
    answer = "```bash\nls\n```"  # 14 characters + <|im_end|> = 15 tokens in the char-level fake
    policy = ScriptedPolicy([answer, answer])
    episode = run(policy, FakeShell(default=FakeResult()), Limits(max_completion_tokens=20), max_tokens=16)
    policy.assert_done()
    assert [r["max_tokens"] for r in policy.requests] == [16, 5]
    assert episode.end_reason == EndReason.TOKEN_LIMIT and episode.completion_tokens == 30


def test_time_limit_and_command_timeouts_within_it():
    policy = ScriptedPolicy(["```bash\nsleep 1\n```"])
    shell = FakeShell(default=FakeResult())
    episode = run(policy, shell, Limits(wall_time_s=100, command_timeout_s=60), clock=FakeClock(step=40))
    policy.assert_done()
    assert episode.end_reason == EndReason.TIME_LIMIT and episode.turns == 1
    assert shell.timeouts == [20]  # what was left of the wall time, not the full command timeout


def test_engine_busy_is_waited_out_and_not_counted_as_agent_time():
    busy = Reply(status=503, headers={"Retry-After": "20"}, error="engine is training")
    policy = ScriptedPolicy([busy, busy, busy, "DONE"])
    clock = FakeClock()
    episode = run(policy, FakeShell(), Limits(wall_time_s=30), clock=clock)
    policy.assert_done()
    assert episode.end_reason == EndReason.SUBMITTED
    assert episode.engine_wait_s == 60 == clock.slept and episode.elapsed_s == 60


def test_engine_busy_for_too_long_is_a_model_error():
    busy = Reply(status=503, headers={"Retry-After": "30"})
    policy = ScriptedPolicy([busy, busy])
    episode = run(policy, FakeShell(), Limits(engine_wait_s=45))
    policy.assert_done()
    assert episode.end_reason == EndReason.MODEL_ERROR and episode.infra_error and "unavailable" in episode.error


def test_context_overflow():
    policy = ScriptedPolicy([Reply(status=400, error="This model's maximum context length is 2048 tokens.")])
    episode = run(policy, FakeShell())
    assert episode.end_reason == EndReason.CONTEXT_OVERFLOW and not episode.infra_error


def test_server_errors_are_retried_then_a_model_error():
    policy = ScriptedPolicy([Reply(status=500, error="boom")] * 3)
    episode = run(policy, FakeShell())
    policy.assert_done()
    assert episode.end_reason == EndReason.MODEL_ERROR and "HTTP 500: boom" in episode.error


def test_a_dead_sandbox_ends_the_episode_as_a_sandbox_error():
    policy = ScriptedPolicy(["```bash\nls\n```"])
    episode = run(policy, FakeShell({"ls": SandboxError("sandbox sb-1 is gone", "start a new one")}))
    assert episode.end_reason == EndReason.SANDBOX_ERROR and episode.infra_error and "sb-1" in episode.error


def test_long_output_is_truncated_in_the_conversation():
    policy = ScriptedPolicy(["```bash\ncat big.log\n```", Reply("DONE", expect="FINAL LINE")])
    episode = run(policy, FakeShell({"cat big.log": "noise\n" * 5000 + "FINAL LINE\n"}), Limits(observation_chars=500))
    policy.assert_done()
    observation = episode.messages[-2]["content"]
    assert len(observation) < 600 and "characters omitted" in observation


def test_scripted_policy_fails_loudly_when_history_is_rewritten():
    policy = ScriptedPolicy(["one", "two"])
    with httpx.Client(transport=policy.transport, base_url="http://x/v1") as http:
        http.post("/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        with pytest.raises(ScriptDivergence, match="rewrote message 1"):
            http.post("/chat/completions", json={"messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "one "}]})
    with pytest.raises(ScriptDivergence):
        policy.assert_done()


def test_fakes_fail_loudly_off_script():
    with pytest.raises(ScriptDivergence, match="unscripted command 'rm -rf /'"):
        FakeShell({"ls": ""}).run("rm -rf /")
    policy = ScriptedPolicy(["```bash\nls\n```"])
    with pytest.raises(ScriptDivergence, match="request 2 but the script has 1"):
        run(policy, FakeShell({"ls": ""}))
    with pytest.raises(ScriptDivergence, match="stopped after 0 of 1"):
        ScriptedPolicy(["DONE"]).assert_done()


@pytest.mark.slow
def test_with_the_real_chat_template_each_prompt_extends_the_last_prompt_and_completion():
    """The merge the trajectory builder relies on, with the bundled tokenizer and our chat template: the
    harness's next prompt starts with the previous prompt plus the sampled tokens (content + <|im_end|>)."""
    from pathlib import Path

    bundled = Path("~/.local/share/appliance/models/SmolLM2-135M-Instruct").expanduser()
    if not (bundled / "tokenizer.json").exists():
        pytest.skip(f"the bundled model's tokenizer is missing at {bundled}; run scripts/setup")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(bundled))
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    answers = ["Let me count.\n```bash\nwc -l < data.txt > count.txt\n```", "```bash\ncat count.txt\n```", "DONE"]
    policy = ScriptedPolicy(answers)
    run(policy, FakeShell({"wc -l < data.txt > count.txt": "", "cat count.txt": "42\n"}))
    policy.assert_done()
    prompts = [tok.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"] for r in policy.requests]
    for prompt, answer, next_prompt in zip(prompts, answers, prompts[1:]):
        sampled = tok(answer, add_special_tokens=False)["input_ids"] + [im_end]
        assert next_prompt[: len(prompt) + len(sampled)] == prompt + sampled


def test_limits_and_client_come_from_the_settings_tree(settings):
    settings.harness.max_turns = 3
    settings.harness.native_tools = True
    assert Limits.from_settings(settings.harness) == Limits(max_turns=3)
    client = ClientConfig.from_settings(settings.harness, "http://127.0.0.1:8200/r/tok/v1", "tok")
    settings.harness.max_tokens_per_call = 99
    client = ClientConfig.from_settings(settings.harness, "http://127.0.0.1:8200/r/tok/v1", "tok")
    assert (client.base_url, client.api_key, client.native_tools, client.max_tokens) == (
        "http://127.0.0.1:8200/r/tok/v1", "tok", True, 99)
    # a turn ends at the first closed code block, and the fence stays in the text the next prompt re-renders
    assert client.extra_body == {"stop": ["```\n"], "include_stop_str_in_output": True}
