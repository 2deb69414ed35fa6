"""An engine stand-in that answers instantly (vLLM's chat endpoint shape: ids, logprobs, SSE): a benchmark
measures the proxy alone against it (`scripts/bench_proxy.py` runs it in its own process), and a test can make
a stream end at the moment its harness hangs up."""

from __future__ import annotations

import asyncio
import json

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from appliance.schemas import EngineState


class InstantEngine:
    """`ServingEngine` for a server running `instant_engine_app`: always SERVING, admits everything."""

    def __init__(self, base_url: str, policy_version: int = 0) -> None:
        self.base_url = base_url
        self.policy_version = policy_version
        self.state = EngineState.SERVING

    def model_name(self) -> str:
        return "policy"

    def try_admit(self) -> bool:
        return True

    def release(self) -> None:
        pass


def instant_engine_app(n_tokens: int = 16, token_delay_s: float = 0.0, finish_reason: str = "length"):
    """A Starlette app shaped like vLLM's chat endpoint (ids, logprobs, SSE) that does no inference; a stream
    waits `token_delay_s` before each token (a slow engine), none by default. Every answer ends with
    `finish_reason` ("abort": as vLLM ends the calls its /sleep cut off)."""
    prompt_ids = list(range(1, 33))
    logprob = {"token": " a", "logprob": -0.5, "bytes": [32, 97], "top_logprobs": []}

    async def chat(request: Request):
        body = await request.json()
        n = min(body.get("max_tokens") or n_tokens, n_tokens)
        base = {"id": "chatcmpl-instant", "created": 0, "model": body.get("model")}
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "prompt_token_ids": prompt_ids, "choices": [{
                "index": 0, "message": {"role": "assistant", "content": " a" * n},
                "logprobs": {"content": [logprob] * n}, "finish_reason": finish_reason, "token_ids": [64] * n}],
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": n,
                          "total_tokens": len(prompt_ids) + n}})

        def chunk(delta: dict, **extra) -> bytes:
            return ("data: " + json.dumps({**base, "object": "chat.completion.chunk", **extra}) + "\n\n").encode()

        async def events():
            yield chunk({}, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                      "finish_reason": None}], prompt_token_ids=prompt_ids)
            for i in range(n):
                if token_delay_s:
                    await asyncio.sleep(token_delay_s)
                yield chunk({}, choices=[{"index": 0, "delta": {"content": " a"}, "logprobs": {"content": [logprob]},
                                          "finish_reason": finish_reason if i == n - 1 else None, "token_ids": [64]}])
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve_instant_engine(port: int, n_tokens: int = 16) -> None:
    """Run `instant_engine_app` in the foreground (a benchmark starts it in its own process)."""
    uvicorn.run(instant_engine_app(n_tokens), host="127.0.0.1", port=port, log_level="warning", access_log=False)
