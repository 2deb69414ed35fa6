"""The tool calls the engine sampled, so a harness's echo of them re-renders as the tokens sampled.

A harness sends the model's earlier tool calls back in each later request. Some re-serialize the arguments
(OpenCode's AI SDK parses them and writes them back compactly: `{"command":"ls"}` for the sampled
`{"command": "ls"}`), so the next prompt no longer extends the tokens the engine sampled: every turn
then starts a new branch of the rollout's tree (trained correctly, but as many samples as turns, each
carrying the whole prompt again). Where the echoed arguments are the same JSON value as a call the engine
sampled for this rollout (same call id), the proxy puts the sampled text back before the engine renders
the prompt. A call the harness changed (another value: Claude Code adds its tool's defaults to an Edit)
is left as the harness sent it: that is the history the harness shows its model.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

MAX_ROLLOUTS = 4096  # rollouts remembered (least recently used dropped): about 1 KB of text per call


class SampledCalls:
    def __init__(self, max_rollouts: int = MAX_ROLLOUTS) -> None:
        self.max_rollouts = max_rollouts
        self._calls: OrderedDict[str, dict[str, str]] = OrderedDict()

    def remember(self, rollout_id: str, answer: dict[str, Any] | None) -> None:
        """The tool calls of a chat answer: a response (`choices[0].message.tool_calls`) or a stream folded
        by `answers.merged` (`tool_call_deltas`)."""
        if not answer:
            return
        found: dict[str, str] = {}
        for choice in answer.get("choices") or ():
            for call in (choice.get("message") or {}).get("tool_calls") or ():
                fn = call.get("function") or {}
                if isinstance(call.get("id"), str) and isinstance(fn.get("arguments"), str):
                    found[call["id"]] = fn["arguments"]
        by_index: dict[Any, list[str]] = {}
        ids: dict[Any, str] = {}
        for delta in answer.get("tool_call_deltas") or ():
            index = delta.get("index", 0)
            if isinstance(delta.get("id"), str):
                ids[index] = delta["id"]
            by_index.setdefault(index, []).append((delta.get("function") or {}).get("arguments") or "")
        for index, parts in by_index.items():
            if index in ids:
                found[ids[index]] = "".join(parts)
        if found:
            self._calls.setdefault(rollout_id, {}).update(found)
            self._calls.move_to_end(rollout_id)
            while len(self._calls) > self.max_rollouts:
                self._calls.popitem(last=False)

    def restore(self, rollout_id: str, chat: dict[str, Any]) -> int:
        """Put the sampled text back into the echoed calls of a chat request; returns how many it restored."""
        sampled = self._calls.get(rollout_id)
        if not sampled:
            return 0
        restored = 0
        for message in chat.get("messages") or ():
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            for call in message.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict):
                    continue
                was = sampled.get(call.get("id"))
                if was is None or fn.get("arguments") == was or not _same_json(fn.get("arguments"), was):
                    continue
                fn["arguments"] = was
                restored += 1
        return restored


def _same_json(a: Any, b: str) -> bool:
    try:
        return isinstance(a, str) and json.loads(a) == json.loads(b)
    except ValueError:
        return False
