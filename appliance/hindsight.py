"""Hindsight relabelling: the policy's own successes kept as demonstrations, hinted ones under the bare request.

A successful rollout of a hinted task (the families' hint ladder puts the rung in `spec.meta["hint"]`:
"tool" or "partial") becomes a demonstration of the bare request: the same answers and observations, under
the unhinted instruction. That instruction is `spec.meta["unhinted_instruction"]` when the task carries it,
else the request without the ladder's "\n\nHint: ..." suffix, else the same task drawn again with no hint
from `meta` split, seed and index (accepted only when its id is `meta["request_id"]`). With
`keep_successes`, every other success is kept too (origin "success"), so the policy's wins stay in the
pool across iterations instead of being trained once and forgotten.

Like every demonstration these are SFT data only (`appliance.demonstrations`): never an RL sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.demonstrations import HINDSIGHT, SUCCESS, to_demonstration
from appliance.errors import ApplianceError
from appliance.harness.builtin import first_messages
from appliance.schemas import Outcome, Split, Task
from appliance.seams import ChatTokenizer
from appliance.store import Store

HINT_MARK = "\n\nHint: "  # how the families' hint ladder appends a hint to the request
HINT, UNHINTED = "hint", "unhinted_instruction"  # spec.meta: the hint rung ("tool", "partial"; None = bare request)


def conversation(store: Store, rollout_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None] | None:
    """A finished rollout's conversation as the harness saw it (the last answered request plus its answer),
    and the tools that request offered (the template renders them into the prompt)."""
    calls = [c for c in store.model_calls(rollout_id) if c.status == "ok" and c.response]
    if not calls:
        return None
    last = calls[-1]
    try:
        message = (last.response or {})["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    kept = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    tools = last.request.get("tools")
    return [dict(m) for m in last.request.get("messages", [])] + [kept], tools if isinstance(tools, list) else None


def unhinted_instruction(task: Task) -> str | None:
    """The bare request of a hinted task, or None when it cannot be recovered."""
    meta = task.spec.get("meta") or {}
    if meta.get(UNHINTED):
        return str(meta[UNHINTED])
    instruction = str(task.spec.get("instruction", ""))
    if HINT_MARK in instruction:  # the ladder appends "\n\nHint: ..." to the bare request
        return instruction.rsplit(HINT_MARK, 1)[0].rstrip() or None
    try:
        from appliance.tasks.families import generate, seed_rng

        split = meta.get("split", "train")
        rng = seed_rng(split, task.family, task.difficulty, meta["seed"], int(meta["index"]))
        bare = generate(task.family, task.difficulty, rng, split=split, hint=None)
    except (KeyError, TypeError, ValueError, ApplianceError):  # no provenance, or families without hints
        return None
    if bare.instruction == task.spec.get("instruction") or (meta.get("request_id") not in (None, bare.id)):
        return None  # not the same task without its hint: do not relabel
    return bare.instruction


def relabel_hindsight(store: Store, run_id: str, iteration: int, tokenize: ChatTokenizer, *,
                      keep_successes: bool = False) -> Relabelled:
    """Successful rollouts of hinted tasks in `iteration` -> demonstrations of the unhinted requests; with
    `keep_successes`, every other success too (origin "success"), so the policy's own wins stay in the
    pool across iterations (deduplicated by conversation) instead of being trained once and forgotten.
    A conversation the chat template cannot render is that rollout's loss (counted), never the phase's."""
    tasks = {t.id: t for t in store.tasks(run_id, split=Split.TRAIN)}
    out = Relabelled()
    for r in store.rollouts(run_id, iteration=iteration, purpose="train"):
        task = tasks.get(r.task_id or "")
        if r.outcome != Outcome.SUCCESS or task is None:
            continue
        meta = task.spec.get("meta") or {}
        plain = unhinted_instruction(task) if meta.get(HINT) else None
        seen = conversation(store, r.id)
        if not seen:
            continue
        messages, tools = seen
        origin = HINDSIGHT
        if not plain:
            if not keep_successes:
                continue
            origin = SUCCESS
        else:
            hinted = f"Task: {task.spec['instruction'].strip()}"
            relabelled = first_messages(plain)[1]["content"]
            swapped = [dict(m, content=relabelled) if m.get("role") == "user" and m.get("content") == hinted else m
                       for m in messages]
            if swapped == messages:  # the hinted request is not where the harness put it: leave it alone
                continue
            messages = swapped
        try:
            demo = to_demonstration(messages, task, tokenize, origin=origin, iteration=iteration, tools=tools)
        except ApplianceError as e:
            out.unrendered[r.id] = e.message
            continue
        out.added += store.add_demonstration(demo)
    return out


@dataclass
class Relabelled:
    """What one relabelling pass did."""

    added: int = 0
    unrendered: dict[str, str] = field(default_factory=dict)  # rollout id -> why the template could not render it
