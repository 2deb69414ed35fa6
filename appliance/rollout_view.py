"""What `appliance rollout show` prints: a rollout's trajectory with model and context tokens told apart.

Sampled tokens (mask 1: what the engine generated and the trainer trains on) and context tokens (prompt,
tool output, re-rendered turns: mask 0) come from the stored samples, decoded with the model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.store import Store


def segments(token_ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """Runs of equal mask: [(mask, ids), ...]."""
    out: list[tuple[int, list[int]]] = []
    for t, m in zip(token_ids, mask):
        if out and out[-1][0] == m:
            out[-1][1].append(t)
        else:
            out.append((m, [t]))
    return out


def rollout_view(store: Store, rollout_id: str, decode: Callable[[list[int]], str]) -> dict[str, Any]:
    r = store.get_rollout(rollout_id)
    calls = store.model_calls(rollout_id)
    samples = store.samples(rollout_id)
    return {
        "rollout": {"id": r.id, "task": r.task_id, "harness": r.harness, "outcome": r.outcome, "reward": r.reward,
                    "turns": r.turns, "error": r.error, "policy_version": r.policy_version},
        "calls": [{"seq": c.seq, "status": c.status, "prompt_tokens": len(c.prompt_ids),
                   "completion_tokens": len(c.completion_ids), "latency_s": round(c.latency_s, 3), "error": c.error}
                  for c in calls],
        "samples": [{"branch": s.branch, "tokens": len(s.token_ids), "sampled": sum(s.mask),
                     "segments": [{"sampled": bool(m), "text": decode(ids)}
                                  for m, ids in segments(s.token_ids, s.mask)]}
                    for s in samples],
    }
