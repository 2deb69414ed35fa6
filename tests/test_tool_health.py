"""Tool-call health per harness and family (issue 48): share of turns calling a tool, parse failures, prose where
a call was expected, harness errors and side calls, read from the recorded calls in each harness's dialect."""

from __future__ import annotations

from typing import Any

from appliance.diagnosis import render_markdown
from appliance.schemas import CapabilityReport, ModelCall, Outcome, Rollout, RolloutStatus
from appliance.store import Store
from appliance.tool_health import answer_of, tool_health, totals
from appliance.tool_health import render_markdown as health_markdown

TOOLS = {"tools": [{"type": "function", "function": {"name": "bash"}}]}


def chat(content: str = "", calls: int = 0) -> dict[str, Any]:
    return {"choices": [{"message": {"content": content, "tool_calls": [{"id": f"c{i}"} for i in range(calls)]}}]}


def add(store: Store, rid: str, harness: str, task: str, answers: list[tuple[str, dict[str, Any] | None]],
        outcome: Outcome = Outcome.FAILURE, error: str | None = None) -> None:
    store.add_rollout(Rollout(rid, "run", task, None, 1, harness, 0, RolloutStatus.PENDING, "train"))
    store.start_rollout(rid)
    for seq, (status, response) in enumerate(answers):
        store.add_model_call(ModelCall(None, rid, seq, status, TOOLS if harness != "builtin" else {}, response,
                                       [1], [2], [-0.1], 0, 0.1))
    store.finish_rollout(rid, outcome, 0.0, error=error, turns=len(answers))


def test_the_dialects_each_harness_speaks_are_read(tmp_path) -> None:
    assert answer_of(chat("x", 2)) == (2, "x")
    assert answer_of({"content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "name": "Bash"}]}) == (1, "ok")
    responses = {"output": [{"type": "function_call", "name": "exec_command"},
                            {"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}
    assert answer_of(responses) == (1, "done")
    assert answer_of(None) == (0, "")


def test_health_per_harness_and_family_and_the_round_that_never_called_a_tool(tmp_path) -> None:
    store = Store(tmp_path / "a.db")
    # opencode: a call, a broken call the parser missed, then the prose answer (expected at the end)
    add(store, "r1", "opencode", "t-files", [("ok", chat(calls=1)), ("side", chat("Title")),
                                              ("ok", chat('<tool_call>[{"name": "bash"')), ("ok", chat("Done."))])
    # codex answered in prose at once: never acted; a crashed Claude Code run is a harness error
    add(store, "r2", "codex", "t-text", [("ok", {"output": [{"type": "message", "content": [{"text": "42"}]}]})],
        outcome=Outcome.SUCCESS)
    add(store, "r3", "claude-code", "t-text", [], outcome=Outcome.INFRA_ERROR,
        error="infra: harness exited 1 after 0 model call(s): boom")
    add(store, "r4", "builtin", "t-files", [("ok", chat("```bash\nls\n```")), ("ok", chat("I think so.")),
                                            ("ok", chat("DONE"))])
    block = tool_health(store, store.rollouts("run"), {"t-files": "files", "t-text": "text"})
    h = block["harnesses"]
    assert h["opencode"]["files"] == {"rollouts": 1, "turns": 3, "tool_turns": 1, "parse_failures": 1,
                                      "prose_turns": 1, "harness_errors": 0, "side_calls": 1}
    assert (h["codex"]["text"]["tool_turns"], h["codex"]["text"]["prose_turns"]) == (0, 1)
    assert h["claude-code"]["text"]["harness_errors"] == 1
    assert (h["builtin"]["files"]["tool_turns"], h["builtin"]["files"]["prose_turns"]) == (1, 1)
    assert not block["never_called_a_tool"] and totals(block)["opencode"]["side_calls"] == 1
    report = CapabilityReport(run_id="run", iteration=1, tool_health=block)
    assert "| opencode | files | 1 | 3 | 1 (33%) | 1 | 1 | 0 | 1 |" in render_markdown(report)
    silent = tool_health(store, [r for r in store.rollouts("run") if r.harness == "codex"], {})
    assert silent["never_called_a_tool"] and "No turn of this round's practice called a tool" in \
        "\n".join(health_markdown(silent))
    assert CapabilityReport.of(report.as_dict()).tool_health == block
    assert health_markdown(None) == [] and CapabilityReport.of({}).tool_health is None  # an older report
