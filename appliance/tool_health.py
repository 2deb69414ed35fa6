"""Tool-call health of an iteration's practice, per harness and task family, read from the recorded calls.

A harness that never gets a tool call through can still score: a question task answered in prose passes
its verifier, and one public run reached 0.93 reward without ever calling a tool. So every report counts,
per harness and family, over the working turns (`ok` calls) of finished practice rollouts:

- `tool_turns`: turns that call a tool (a parsed tool call in any dialect; for the built-in harness's
  fenced format, a turn whose ```bash block it parsed as a command);
- `parse_failures`: turns whose text holds a tool-call form the parser could not read (`<tool_call>`,
  `[TOOL_CALLS]`, `<|python_tag|>`) and no parsed call: the engine's parser and the model disagree;
- `prose_turns`: turns offered tools that answered in prose where a call was expected: any but the last
  turn of its rollout (a prose answer ends a tool harness's loop early), or the last when the rollout never
  called a tool (no task here is done without acting); for the built-in harness, answers with no command
  and no DONE (the parse errors it fed back);
- `harness_errors`: rollouts whose harness exited non-zero (the infra errors `practice` records so);
- `side_calls`: the harness's side calls (titles, summaries; `side` rows), not trained.

`never_called_a_tool` flags a round with working turns and not one tool call: the TUI shows it.
What the response says is read in the dialect the harness spoke (chat completions, Anthropic Messages,
Responses), as the proxy recorded it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from appliance.schemas import ModelCall, Outcome, Rollout
from appliance.store import Store

CALL_FORMS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>")
COUNTS = ("rollouts", "turns", "tool_turns", "parse_failures", "prose_turns", "harness_errors", "side_calls")
BUILTIN = "builtin"


def answer_of(response: dict[str, Any] | None) -> tuple[int, str]:
    """(tool calls, text) of a recorded answer, whichever dialect it is in."""
    if not isinstance(response, dict):
        return 0, ""
    if response.get("choices"):  # chat completions
        message = (response["choices"][0] or {}).get("message") or {}
        content = message.get("content")
        return len(message.get("tool_calls") or []), content if isinstance(content, str) else ""
    if isinstance(response.get("output"), list):  # Responses
        items = [i for i in response["output"] if isinstance(i, dict)]
        calls = sum(i.get("type") in ("function_call", "custom_tool_call") for i in items)
        text = "".join(c.get("text", "") for i in items if i.get("type") == "message"
                       for c in i.get("content") or [] if isinstance(c, dict))
        return calls, text
    blocks = [b for b in response.get("content") or [] if isinstance(b, dict)]  # Anthropic Messages
    return sum(b.get("type") == "tool_use" for b in blocks), "".join(b.get("text", "") for b in blocks
                                                                      if b.get("type") == "text")


def _builtin_turn(response: dict[str, Any] | None) -> tuple[bool, bool]:
    """(called, prose) of a built-in harness turn: a parsed command, or neither a command nor DONE."""
    from appliance.harness.actions import parse_action

    try:
        message = response["choices"][0]["message"] if response else None
    except (KeyError, IndexError, TypeError):
        message = None
    if not message:
        return False, False
    action = parse_action(message)
    return bool(action.command), not action.command and not action.submit


def rollout_health(rollout: Rollout, calls: list[ModelCall]) -> dict[str, int]:
    """The counts of one finished rollout (see the module docstring)."""
    out = dict.fromkeys(COUNTS, 0)
    out["rollouts"] = 1
    out["harness_errors"] = int((rollout.error or "").startswith("infra: harness exited"))
    out["side_calls"] = sum(c.status == "side" for c in calls)
    turns = [c for c in calls if c.status == "ok"]
    out["turns"] = len(turns)
    called: list[bool] = []
    for call in turns:
        if rollout.harness == BUILTIN:
            did, prose = _builtin_turn(call.response)
            called.append(did)
            out["prose_turns"] += prose
            continue
        n, text = answer_of(call.response)
        called.append(n > 0)
        out["parse_failures"] += n == 0 and any(form in text for form in CALL_FORMS)
    out["tool_turns"] = sum(called)
    if rollout.harness != BUILTIN:
        offered = [bool(c.request.get("tools")) for c in turns]
        last = len(turns) - 1
        out["prose_turns"] = sum(o and not did and (i < last or not any(called))
                                 for i, (o, did) in enumerate(zip(offered, called, strict=True)))
    return out


def tool_health(store: Store, rollouts: list[Rollout], family_of: dict[str, str]) -> dict[str, Any]:
    """The iteration's block: {"harnesses": {harness: {family: counts}}, "never_called_a_tool": bool};
    `family_of` maps task ids to families (a rollout of an unknown task counts under "?")."""
    table: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for r in rollouts:
        if r.purpose != "train" or r.outcome is None or (r.outcome == Outcome.INFRA_ERROR and not
                                                         (r.error or "").startswith("infra: harness exited")):
            continue
        counts = rollout_health(r, store.model_calls(r.id))
        cell = table[r.harness].setdefault(family_of.get(r.task_id or "", "?"), dict.fromkeys(COUNTS, 0))
        for k, v in counts.items():
            cell[k] += v
    turns = sum(c["turns"] for fams in table.values() for c in fams.values())
    calls = sum(c["tool_turns"] for fams in table.values() for c in fams.values())
    return {"harnesses": {h: dict(sorted(f.items())) for h, f in sorted(table.items())},
            "never_called_a_tool": turns > 0 and calls == 0}


def totals(block: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    """Per harness, the counts summed over its families."""
    out: dict[str, dict[str, int]] = {}
    for harness, families in ((block or {}).get("harnesses") or {}).items():
        out[harness] = {k: sum(int(c.get(k, 0)) for c in families.values()) for k in COUNTS}
    return out


def share(counts: dict[str, int]) -> str:
    return f"{counts['tool_turns'] / counts['turns']:.0%}" if counts.get("turns") else "-"


def render_markdown(block: dict[str, Any] | None) -> list[str]:
    """The report's section (empty for a report written before it existed)."""
    if not block or not block.get("harnesses"):
        return []
    lines = ["", "## Tool-call health (practice)", ""]
    if block.get("never_called_a_tool"):
        lines += ["**No turn of this round's practice called a tool**: rewards came without acting.", ""]
    lines += ["| harness | family | rollouts | turns | calling a tool | parse failures | prose where a call was "
              "expected | harness errors | side calls |", "|---" * 9 + "|"]
    for harness, families in block["harnesses"].items():
        for family, c in families.items():
            lines.append(f"| {harness} | {family} | {c['rollouts']} | {c['turns']} | {c['tool_turns']} "
                         f"({share(c)}) | {c['parse_failures']} | {c['prose_turns']} | {c['harness_errors']} | "
                         f"{c['side_calls']} |")
    return lines
