"""A scripted vLLM server for the engine's GPU paths, which no CPU machine can run: sleep mode (levels 1
and 2, wake by tags), weight reload, LoRA adapters and the canary, behind vLLM 0.32's HTTP routes.

`ScriptedVLLM` is an httpx transport: hand `client()` to `Engine._http` and `launch`/`wait_healthy`/`kill`
to `appliance.serving.process` (tests/serving/test_engine_gpu.py does both), and the engine's state machine
runs against it unchanged. It keeps the state vLLM keeps and refuses, with a 500 and the reason (as vLLM
answers a broken call), what vLLM would not do or would do wrong:

  - generating while the weights or the KV cache sleep;
  - sleeping twice, reloading or loading an adapter while the weights sleep;
  - after level 2 the woken weights are garbage until `reload_weights` (vLLM discards them): its canary
    is then another model's, which the engine's canary must catch.

The canary a weights state answers is a function of what is loaded (full folder, adapter) with
`noise` nats added to each log-probability, as bfloat16 serving moves them against a float32 reference
(and `adapter_noise` more while an adapter serves);
`reference(weights)` is the trainer's side, without noise. `calls` lists every request as
"METHOD /path?query" for the tests to compare with the order the engine must keep, and `timeouts` the
read timeout each route was last called with.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx

from appliance.serving.canary import Canary


class FakeProcess:
    """What `process.launch` returns: a live process until `die()`."""

    _next_pid = 40000

    def __init__(self) -> None:
        FakeProcess._next_pid += 1
        self.pid = FakeProcess._next_pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def die(self, code: int = -9) -> None:
        self.returncode = code


class ScriptedVLLM:
    def __init__(self, *, canary_tokens: int = 16, noise: float = 0.0, vocab: int = 1000,
                 served_name: str = "policy") -> None:
        self.canary_tokens, self.noise, self.vocab, self.served_name = canary_tokens, noise, vocab, served_name
        self.adapter_noise = 0.0  # more drift while an adapter serves (bf16 LoRA kernels): beyond a tolerance
        self.calls: list[str] = []
        self.timeouts: dict[str, float | None] = {}  # path -> the read timeout its latest request carried
        self.launches: list[Path] = []
        self.fail: dict[str, str] = {}  # path -> error text: that route answers 500 (one-shot)
        self.proc: FakeProcess | None = None
        self._boot(None)

    # --- the process seam -------------------------------------------------------------------------
    def launch(self, settings: Any, weights: Path, tokenizer: Path) -> tuple[FakeProcess, Path]:
        self._boot(Path(weights))
        self.launches.append(Path(weights))
        self.proc = FakeProcess()
        return self.proc, Path(settings.home) / "engine-fake.log"

    def wait_healthy(self, proc: FakeProcess, base_url: str, timeout_s: float, log_path: Path) -> None:
        assert proc is self.proc, "waited on a process this server did not start"

    def kill(self, proc: FakeProcess, grace_s: float = 15.0) -> None:
        proc.die()

    def client(self, base_url: str = "http://127.0.0.1:8100") -> httpx.Client:
        return httpx.Client(base_url=base_url, transport=httpx.MockTransport(self.handle))

    # --- vLLM's state -----------------------------------------------------------------------------
    def _boot(self, weights: Path | None) -> None:
        self.full = weights  # what the weights memory holds (None: garbage after a level-2 wake)
        self.adapters: dict[str, Path] = {}
        self.sleeping: dict[str, bool] = {"weights": False, "kv_cache": False}
        self.level: int | None = None
        self._offloaded: Path | None = None  # level 1 keeps the weights in host memory

    def canary_for(self, full: Path | None, adapter: Path | None, noise: float) -> Canary:
        """The greedy tokens and their log-probabilities these weights give (a hash of what they are)."""
        seed = hashlib.sha256(f"{full}|{adapter}".encode()).digest()
        ids = [seed[i] * 3 % self.vocab for i in range(self.canary_tokens)]
        lps = [-0.1 - seed[i] / 255 for i in range(self.canary_tokens)]
        # a runner-up 1 nat below: no near-tie, so a changed token is a divergence, never a flip
        return Canary(ids, [lp + noise for lp in lps], [((t + 1) % self.vocab, lp - 1.0) for t, lp in zip(ids, lps)])

    def reference(self, weights: Any) -> Canary:
        """The trainer's canary for `weights` (an appliance.serving.weights.Weights): float32, no noise."""
        return self.canary_for(Path(weights.full), Path(weights.lora) if weights.lora else None, 0.0)

    # --- the routes ---------------------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        path, query = request.url.path, dict(request.url.params)
        self.calls.append(f"{request.method} {path}" + (f"?{request.url.query.decode()}" if query else ""))
        self.timeouts[path] = (request.extensions.get("timeout") or {}).get("read")
        body = json.loads(request.content) if request.content else {}
        if self.proc is None or self.proc.poll() is not None:
            raise httpx.ConnectError("the scripted vLLM is not running", request=request)
        if path in self.fail:
            return httpx.Response(500, text=self.fail.pop(path))
        try:
            return httpx.Response(200, json=self._route(request.method, path, query, body))
        except _Refused as e:
            return httpx.Response(500, text=str(e))

    def _route(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> Any:
        if path == "/health":
            return {}
        if path == "/is_sleeping":
            return {"is_sleeping": any(self.sleeping.values())}
        if path == "/tokenize":
            return {"tokens": [1, 2, 3, 4, 5], "count": 5}
        if path == "/sleep":
            if any(self.sleeping.values()):
                raise _Refused("sleep: the engine is already asleep")
            self.level = int(query.get("level", 1))
            self._offloaded = self.full if self.level == 1 else None
            self.sleeping = {"weights": True, "kv_cache": True}
            return {}
        if path == "/wake_up":
            tags = [query["tags"]] if "tags" in query else ["weights", "kv_cache"]
            for tag in tags:
                if tag == "weights" and self.sleeping["weights"]:
                    self.full = self._offloaded  # level 2: nothing was kept, the buffers are garbage
                self.sleeping[tag] = False
            return {}
        if path == "/collective_rpc":
            self._awake("weights", "reload_weights")
            if body.get("method") != "reload_weights":
                raise _Refused(f"collective_rpc: unscripted method {body.get('method')!r}")
            self.full = Path(body["kwargs"]["weights_path"])
            return {"results": [None]}
        if path == "/reset_prefix_cache":
            return {}
        if path == "/v1/load_lora_adapter":
            self._awake("weights", "load_lora_adapter")
            self.adapters[body["lora_name"]] = Path(body["lora_path"])
            return {}
        if path == "/v1/unload_lora_adapter":
            self.adapters.pop(body["lora_name"], None)
            return {}
        if path == "/v1/completions":
            self._awake("weights", "generate")
            self._awake("kv_cache", "generate")
            return self._completion(body)
        raise _Refused(f"unscripted route {method} {path}")

    def _awake(self, tag: str, what: str) -> None:
        if self.sleeping[tag]:
            raise _Refused(f"{what} while the {tag} sleep (wake_up tags={tag} first)")

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["model"]
        adapter = self.adapters.get(name)
        if adapter is None and name != self.served_name:
            raise _Refused(f"the model {name!r} does not exist")
        c = self.canary_for(self.full, adapter, self.noise + (self.adapter_noise if adapter else 0.0))
        tops = [{f"token_id:{t}": lp, f"token_id:{r}": rlp} for t, lp, (r, rlp) in zip(c.ids, c.logprobs, c.runner_up)]
        return {"choices": [{"token_ids": c.ids, "logprobs": {"token_logprobs": c.logprobs, "top_logprobs": tops}}]}


class _Refused(Exception):
    pass
