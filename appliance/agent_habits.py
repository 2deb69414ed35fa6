"""The agent's habits in practice, read from the recorded model calls: commands per episode, episodes that
only looked and never acted, DONE said right after a command failed (the capability report prints them;
`scripts/bench learning --report-only` prints them per iteration)."""

from __future__ import annotations

import re
from typing import Any

from appliance.schemas import Outcome, Rollout
from appliance.store import Store


def _answer(call: Any) -> dict[str, Any] | None:
    """The assistant message of a recorded model call, None when it has none."""
    try:
        return call.response["choices"][0]["message"] if call.response else None
    except (KeyError, IndexError, TypeError):
        return None


def first_command(store: Store, rollout_id: str) -> str | None:
    from appliance.harness.actions import parse_action

    for call in store.model_calls(rollout_id):
        message = _answer(call)
        if message:
            command = parse_action(message).command
            if command:
                return " ".join(command.split())[:120]
    return None


# Programs that only read the workspace: a command made of these alone (no redirection, no find action)
# looks, it does not act. An episode of looks alone has done nothing the task asked for.
READ_ONLY = frozenset({"ls", "cat", "head", "tail", "wc", "pwd", "file", "stat", "tree", "find", "less", "more"})
_FIND_ACTIONS = ("-delete", "-exec", "-execdir", "-ok", "-fprint", "-fls")


def is_look(command: str) -> bool:
    """Whether a command only reads: every program of its pipeline read-only, nothing redirected."""
    if ">" in command or any(a in command.split() for a in _FIND_ACTIONS):
        return False
    programs = [part.split()[0] for part in re.split(r"\|\||&&|[|;\n]", command) if part.split()]
    return bool(programs) and all(p in READ_ONLY for p in programs)


def habits(store: Store, rollouts: list[Rollout]) -> dict[str, Any]:
    """How the agent works, over finished practice rollouts of the built-in harness's format: how often it
    says DONE right after a command failed, and how many episodes only looked and never acted."""
    from appliance.harness.actions import observed_exit_code, parse_action

    done_after_error = turns_after_error = only_looks = commands = episodes = 0
    for r in rollouts:
        if r.purpose != "train" or r.outcome in (None, Outcome.INFRA_ERROR):
            continue
        calls = store.model_calls(r.id)
        said = [parse_action(m) if (m := _answer(call)) else None for call in calls]
        ran = [a.command for a in said if a is not None and a.command]
        episodes += 1
        commands += len(ran)
        only_looks += bool(ran) and all(is_look(c) for c in ran)
        for call, action in zip(calls[1:], said[1:], strict=False):
            last = (call.request.get("messages") or [{}])[-1]
            code = observed_exit_code(str(last.get("content") or "")) if last.get("role") in ("user", "tool") else None
            if code not in (None, 0):
                turns_after_error += 1
                done_after_error += action is not None and action.submit and not action.command
    return {"episodes": episodes, "commands_mean": commands / episodes if episodes else 0.0,
            "only_looks": only_looks, "turns_after_error": turns_after_error, "done_after_error": done_after_error}
