import pytest

from appliance.diagnosis import build_report, failure_mode
from appliance.schemas import FailureMode, Outcome, Rollout, RolloutStatus, Split, Task, TaskStatus
from appliance.store import Store


def _finish(store: Store, rid: str, task: str, outcome: Outcome, error: str | None = None) -> None:
    store.add_rollout(Rollout(rid, "r", task, "g", 1, "builtin", 1, RolloutStatus.PENDING))
    store.start_rollout(rid)
    store.finish_rollout(rid, outcome, 1.0 if outcome == Outcome.SUCCESS else 0.0, error=error)


def test_report_counts_pass_rates_modes_trend_and_regressions(store: Store) -> None:
    store.create_run("r", {})
    store.add_task(Task("t1", "r", "files", 1, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}))
    store.set_task_status("t1", TaskStatus.VALID)
    store.set_task_status("t1", TaskStatus.LEARNABLE, pass_rate=0.5)
    _finish(store, "a", "t1", Outcome.SUCCESS)
    _finish(store, "b", "t1", Outcome.FAILURE, "wrong_answer: verifier failed")
    _finish(store, "c", "t1", Outcome.TRUNCATED, "turn_limit: 8 turns")
    _finish(store, "d", "t1", Outcome.INFRA_ERROR, "infra: sandbox died")
    store.set_eval("r", 0, 0, "files", 1, 10, 5)
    store.set_eval("r", 0, 0, "text", 1, 10, 2)
    store.set_eval("r", 1, 1, "files", 1, 10, 7)
    store.set_eval("r", 1, 1, "text", 1, 10, 1)

    calls = []
    report, md = build_report(store, "r", 1, generate_text=lambda p: calls.append(p) or "I am weak at files.")
    assert report.heldout_pass_at_1 == 8 / 20
    assert [t["pass_at_1"] for t in report.trend] == [7 / 20, 8 / 20]
    assert report.train["files"]["1"] == {"n": 3, "passed": 1, "pass_rate": 1 / 3}  # infra excluded
    assert report.failure_modes == {"wrong_answer": 1, "turn_limit": 1, "infra:sandbox": 1}
    assert report.infra_error_rate == 0.25
    # text went 2/10 -> 1/10: its intervals overlap, so it is noise, not a finding
    assert report.regressions == []
    [drop] = report.regressions_within_noise
    assert (drop["family"], drop["before"], drop["after"]) == ("text", 0.2, 0.1)
    assert drop["before_counts"] == [2, 10] and drop["after_counts"] == [1, 10]
    # practice alone ranks the families: text's poor held-out cells never steer the curriculum
    assert report.weak_families == ["files"] and report.family_pass_rate == {"files": 1 / 3}
    assert report.band == {"files": {"learnable": 1}}
    assert report.analysis == "I am weak at files." and "files" in calls[0]
    assert "Held-out pass@1:** 40.0%" in md and "| files | 7/10 |" in md


def test_only_drops_beyond_noise_are_regressions(store: Store) -> None:
    store.create_run("r", {})
    before = {"a": 4, "b": 1, "c": 3, "d": 2, "e": 9}  # passed of 4 (e: of 10) at iteration 0
    after = {"a": 0, "b": 0, "c": 0, "d": 3, "e": 1}
    for family, passed in before.items():
        n = 10 if family == "e" else 4
        store.set_eval("r", 0, 0, family, 2, n, passed)
        store.set_eval("r", 1, 1, family, 2, n, after[family])
    report, md = build_report(store, "r", 1)
    # 4/4 -> 0/4 and 9/10 -> 1/10 clear the noise; 1/4 -> 0/4 and 3/4 -> 0/4 are what 4 samples give; d went up
    assert [r["family"] for r in report.regressions] == ["a", "e"]
    assert [r["family"] for r in report.regressions_within_noise] == ["b", "c"]
    a = report.regressions[0]
    assert a["after_interval"][1] < a["before_interval"][0]
    assert "Wilson" in report.regression_rule and f"Rule: {report.regression_rule}." in md
    assert "- a L2: 4/4 [51%, 100%] → 0/4 [0%, 49%]" in md
    assert "Within noise: 2 cell(s)" in md and "b L2: 1/4" in md


def test_no_drops_no_regressions_section(store: Store) -> None:
    store.create_run("r", {})
    store.set_eval("r", 0, 0, "files", 2, 4, 1)
    store.set_eval("r", 1, 1, "files", 2, 4, 1)
    report, md = build_report(store, "r", 1)
    assert report.regressions == report.regressions_within_noise == []
    assert "## Regressions" not in md


def test_a_verifier_timeout_is_its_own_mode_and_still_the_agents_failure(store: Store) -> None:
    # practice writes it when what the agent left made the verifier hang (tests/practice/test_hostile_agent.py)
    store.create_run("r", {})
    store.add_task(Task("t1", "r", "script", 1, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}))
    _finish(store, "a", "t1", Outcome.FAILURE, FailureMode.VERIFIER_TIMEOUT.reason("verifier failed"))
    _finish(store, "b", "t1", Outcome.FAILURE, FailureMode.WRONG_ANSWER.reason("verifier failed"))
    report, md = build_report(store, "r", 1)
    assert report.failure_modes == {"verifier_timeout": 1, "wrong_answer": 1}
    assert report.train["script"]["1"]["n"] == 2 and report.infra_error_rate == 0.0  # not an infra error
    assert "- verifier_timeout: 1" in md


def test_analysis_failure_does_not_break_the_report(store: Store) -> None:
    store.create_run("r", {})

    def busy(_: str) -> str:
        raise RuntimeError("engine sleeping")

    report, md = build_report(store, "r", 0, generate_text=busy)
    assert report.heldout_pass_at_1 is None and "engine sleeping" in report.analysis
    assert "n/a" in md


def test_failure_mode_defaults() -> None:
    r = Rollout("x", None, None, None, 0, "h", 0, RolloutStatus.FINISHED, outcome=Outcome.TRUNCATED)
    assert failure_mode(r) == "turn_limit"
    r.outcome = Outcome.SUCCESS
    assert failure_mode(r) is None


@pytest.mark.parametrize(("outcome", "error", "mode"), [
    (Outcome.FAILURE, FailureMode.WRONG_ANSWER.reason("verifier failed"), "wrong_answer"),
    (Outcome.FAILURE, "format_error: verifier failed; tampered with a.txt", "format_error"),
    (Outcome.FAILURE, FailureMode.VERIFIER_TIMEOUT.reason("verifier failed"), "verifier_timeout"),
    (Outcome.FAILURE, "verifier_timeout: verifier failed; tampered with run.sh", "verifier_timeout"),
    (Outcome.FAILURE, "infra: not written for a failure", "wrong_answer"),
    (Outcome.FAILURE, None, "wrong_answer"),
    (Outcome.TRUNCATED, "token_limit: after 3 turns", "token_limit"),
    (Outcome.TRUNCATED, "context_overflow", "context_overflow"),
    (Outcome.TRUNCATED, "something else: x", "turn_limit"),
    (Outcome.INFRA_ERROR, "infra: SandboxError: podman died", "infra:SandboxError:"),
    (Outcome.INFRA_ERROR, "infra: trajectory: calls do not chain", "infra:trajectory:"),
    (Outcome.INFRA_ERROR, None, "infra:unknown"),
    (Outcome.SUCCESS, "success; tampered with a.txt", None),
])
def test_failure_mode_reads_what_practice_writes(outcome: Outcome, error: str | None, mode: str | None) -> None:
    r = Rollout("x", None, None, None, 0, "h", 0, RolloutStatus.FINISHED, outcome=outcome, error=error)
    assert failure_mode(r) == mode


def test_failure_mode_text_round_trips() -> None:
    for mode in FailureMode:
        assert FailureMode.read(mode.reason("a: b")) == (mode, "a: b")
    assert FailureMode.reason(FailureMode.TURN_LIMIT, "after 8 turns") == "turn_limit: after 8 turns"  # stored text
    assert FailureMode.read("success; tampered with x") == (None, "success; tampered with x")
    assert FailureMode.read(None) == (None, "")


def test_capability_is_computed_per_operation_and_the_analysis_is_gated(store: Store) -> None:
    from appliance.diagnosis import analysis_quality, capability
    from appliance.schemas import ModelCall, Outcome, Rollout, RolloutStatus, Split, Task, TaskStatus

    store.create_run("r", {})
    task = Task("r.t1", "r", "text", 2, "procedural", Split.TRAIN, TaskStatus.VALID,
                {"id": "t1", "instruction": "Count the lines of notes.txt into n.txt.",
                 "meta": {"operation": "wc-lines"}})
    store.add_task(task)
    for i, (outcome, answer) in enumerate([(Outcome.FAILURE, "```bash\nwc -l < X > Y\n```"),
                                           (Outcome.FAILURE, "```bash\nwc -l < X > Y\n```"),
                                           (Outcome.SUCCESS, "```bash\nwc -l < notes.txt > n.txt\n```")]):
        rid = f"ro{i}"
        store.add_rollout(Rollout(rid, "r", task.id, "g", 1, "builtin", 0, RolloutStatus.PENDING, "train"))
        store.start_rollout(rid)
        store.add_model_call(ModelCall(None, rid, 0, "ok", {"messages": []},
                                       {"choices": [{"message": {"role": "assistant", "content": answer}}]},
                                       [1], [2], [0.0], 0, 0.1))
        store.finish_rollout(rid, outcome, float(outcome == Outcome.SUCCESS),
                             error=None if outcome == Outcome.SUCCESS else "wrong_answer: verifier failed")
    cap = capability(store, store.rollouts("r"), {task.id: task})
    cell = cap["text"]["2"]
    assert (cell["n"], cell["passed"]) == (3, 1) and cell["failure_modes"] == {"wrong_answer": 2}
    assert cell["wrong_commands"] == [("wc -l < X > Y", 2)]
    assert cell["example"] == {"task": "Count the lines of notes.txt into n.txt.", "ran": "wc -l < X > Y"}
    assert cell["operations"] == {"wc-lines": {"n": 3, "passed": 1}}

    repeated = ("I'm currently working on a project that requires me to review my own practice results. " * 3)
    assert analysis_quality(repeated, ["text"]) == "it repeats a sentence"
    assert analysis_quality("I am weakest at git branches and should practise merges next.", ["text", "data"]) \
        == "it names no task family it practised"
    assert analysis_quality("I fail wc-lines in text tasks: I write the example command instead.", ["text"]) is None


def test_habits_count_done_right_after_a_failed_command_and_episodes_that_only_look(store: Store) -> None:
    from appliance.agent_habits import is_look
    from appliance.harness.actions import format_observation
    from appliance.sandbox.shell import ExecResult
    from appliance.schemas import ModelCall

    def episode(rid: str, outcome: Outcome, turns: list[tuple[str, int | None]]) -> None:
        """turns: (what the agent said, exit code of its command or None for DONE)"""
        _finish(store, rid, "t1", outcome)
        messages: list[dict] = [{"role": "user", "content": "Task: ..."}]
        for seq, (said, code) in enumerate(turns):
            store.add_model_call(ModelCall(None, rid, seq, "ok", {"messages": list(messages)},
                                           {"choices": [{"message": {"role": "assistant", "content": said}}]},
                                           [1], [2], [-0.1], 1, 0.0))
            messages.append({"role": "assistant", "content": said})
            if code is not None:
                messages.append({"role": "user",
                                 "content": format_observation(ExecResult(code, "", "oops", 0.1), 2000)})

    store.create_run("r", {})
    store.add_task(Task("t1", "r", "files", 2, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}))
    episode("a", Outcome.FAILURE, [("```bash\nzipp -r a.zip a\n```", 127), ("DONE", None)])
    episode("b", Outcome.SUCCESS, [("```bash\nsort x > y\n```", 2), ("```bash\nsort -o y x\n```", 0), ("DONE", None)])
    episode("c", Outcome.FAILURE, [("```bash\nls -la\n```", 0), ("```bash\nhead -n 5 x | wc -l\n```", 0),
                                   ("DONE", None)])
    report, md = build_report(store, "r", 1)
    assert report.habits == {"episodes": 3, "commands_mean": 5 / 3, "only_looks": 1, "turns_after_error": 2,
                                "done_after_error": 1}
    assert "1 of 2 turns right after a failed command said DONE" in md and "1 of 3 episodes only looked" in md
    assert is_look("find . -name '*.txt'") and not is_look("find . -name '*.tmp' -delete")
    assert not is_look("cat a > b") and not is_look("ls && rm x")


def test_the_report_shows_self_proposals_yield_of_its_own_iteration(store: Store) -> None:
    store.create_run("r", {})
    spec = {"meta": {"round": "proposed"}}
    for tid, status in [("p1", TaskStatus.REJECTED), ("p2", TaskStatus.TOO_HARD), ("p3", TaskStatus.LEARNABLE),
                        ("p4", TaskStatus.TOO_EASY), ("p5", TaskStatus.PROPOSED)]:
        store.add_task(Task(tid, "r", "files", 2, "self_proposed", Split.TRAIN, TaskStatus.PROPOSED, spec,
                            iteration=1))
        if status != TaskStatus.PROPOSED:
            store.set_task_status(tid, TaskStatus.REJECTED if status == TaskStatus.REJECTED else TaskStatus.VALID)
        if status not in (TaskStatus.PROPOSED, TaskStatus.REJECTED):
            store.set_task_status(tid, status)
    store.add_task(Task("old", "r", "files", 2, "self_proposed", Split.TRAIN, TaskStatus.VALID, spec, iteration=0))
    store.set_metrics("r", 1, {"propose_asked": 8.0, "propose_parsed": 6.0})
    for rid, (task, outcome) in enumerate([("p3", Outcome.SUCCESS), ("p3", Outcome.FAILURE),
                                           ("p4", Outcome.SUCCESS), ("p2", Outcome.FAILURE)]):
        store.add_rollout(Rollout(f"x{rid}", "r", task, f"g-{task}", 1, "builtin", 1, RolloutStatus.PENDING,
                                  purpose="train"))
        store.start_rollout(f"x{rid}")
        store.finish_rollout(f"x{rid}", outcome, 1.0 if outcome == Outcome.SUCCESS else 0.0)
    report, md = build_report(store, "r", 1)
    # asked 8, parsed 6, 5 stored (one a duplicate), 3 passed validation, p3 learnable, p3 and p4 trained
    assert report.self_proposal == {"asked": 8, "parsed": 6, "stored": 5, "valid": 3, "learnable": 1, "trained": 2}
    assert "asked 8 -> parsed 6 -> stored 5 -> valid 3 -> learnable 1 -> trained 2" in md
    assert build_report(store, "r", 2)[0].self_proposal == {}  # not asked at iteration 2
