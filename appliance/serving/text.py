"""The policy writing text outside an episode (the report's analysis, self-proposal): one greedy chat call
to the engine, returned as a plain callable the loop injects where the phases ask for `generate_text`."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from appliance.seams import Engine


def policy_text(engine: Engine, max_tokens: int = 96, timeout_s: float = 300.0) -> Callable[[str], str]:
    def generate(prompt: str) -> str:
        body = {"model": engine.model_name(), "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens, "temperature": 0.0}
        r = httpx.post(f"{engine.base_url}/v1/chat/completions", json=body, timeout=timeout_s)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"] or ""

    return generate
