"""`appliance serve` and `appliance calls`: the engine and proxy outside the loop, for a person or a harness.

A debug rollout (purpose "debug") gets a fresh route, so any harness pointed at the printed base URL is
recorded exactly as in training; `call_summaries` is what `appliance calls --json` prints.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Any

from appliance.proxy.routes import register_route
from appliance.schemas import Rollout, RolloutStatus, now
from appliance.store import Store


@dataclass(frozen=True)
class DebugRoute:
    rollout_id: str
    openai_base_url: str
    anthropic_base_url: str


def open_debug_route(store: Store, proxy_url: str, policy_version: int, harness: str = "debug") -> DebugRoute:
    rollout_id = f"debug-{uuid.uuid4().hex[:12]}"
    store.add_rollout(Rollout(rollout_id, None, None, None, None, harness, policy_version,
                              RolloutStatus.RUNNING, purpose="debug", started_at=now()))
    base = f"{proxy_url}/r/{register_route(store, rollout_id)}"
    return DebugRoute(rollout_id, f"{base}/v1", base)


def call_summaries(store: Store, rollout_id: str) -> list[dict[str, Any]]:
    """One dict per recorded call: ids, lengths, logprobs, latency, status."""
    store.get_rollout(rollout_id)  # NotFoundError with a hint when the id is wrong
    out = []
    for c in store.model_calls(rollout_id):
        d = asdict(c)
        d.pop("request")
        d.pop("response")
        d["prompt_len"], d["completion_len"] = len(c.prompt_ids), len(c.completion_ids)
        out.append(d)
    return out
