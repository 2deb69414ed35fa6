"""The policy writing text outside an episode (the report's analysis, self-proposal): one chat call to the
engine, returned as a plain callable (`seams.PolicyText`) the loop injects where the phases ask for
`generate_text`. Without arguments a call is short and greedy (the analysis); self-proposal asks for more
tokens and a temperature."""

from __future__ import annotations

import httpx

from appliance.seams import Engine, PolicyText


def policy_text(engine: Engine, max_tokens: int = 96, timeout_s: float = 300.0) -> PolicyText:
    default_tokens = max_tokens

    def generate(prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        body = {"model": engine.model_name(), "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens or default_tokens, "temperature": temperature or 0.0}
        r = httpx.post(f"{engine.base_url}/v1/chat/completions", json=body, timeout=timeout_s)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"] or ""

    return generate
