"""The canary's evidence and its verdict: does the engine serve the weights the trainer has?

A canary is a few greedy tokens of a fixed prompt with, per token, its log-probability (log-softmax at
T=1) and the runner-up token with its log-probability. The engine's canary (vLLM, `logprobs=2`) is
compared with the trainer's (appliance.training.reference, float32 transformers) after a sync, and with
its own earlier canary after a wake.

With `tolerance` 0 (the cpu profile: float32 on both sides) the tokens must be equal, as they always were.
With a tolerance (the gpu profile serves bfloat16 against a float32 reference) exact equality would
fail on every near-tie: bfloat16 moves each logit a little, and where the reference's top two tokens are
closer than that the argmax flips and every sync would roll back. So the comparison is by distance:

  - where both chose the same token, the two log-probabilities of that token differ by at most
    `tolerance` nats;
  - at the first position where they chose differently, the flip is a near-tie, not a divergence, when
    the engine's token is the reference's runner-up, the reference ranks it at most `tolerance` below its
    own choice, and the engine's log-probability of it is within `tolerance` of the reference's; after a
    flip the two continuations have different contexts, so nothing later is compared.

The comparison after a sync is differential. bfloat16 logits and bfloat16 LoRA kernels can move every
token's log-probability the same way on a GPU, past any fixed tolerance, and then every sync would be
rolled back while the run looked healthy. So the engine measures its offset from the reference once, on
weights both sides hold alike (what it serves when it starts: `Offset`, engine minus reference, its
mean and its spread), and a sync is judged by how far the new canary strays beyond that offset: each
token's delta less the mean offset, within `tolerance` plus the spread measured at the base. A real
divergence (other weights) still moves the tokens themselves, or their log-probabilities by nats.

Wrong weights (a stale tied lm_head, an adapter that did not load, another model) move the canary
tokens' log-probabilities by nats; bfloat16 moved SmolLM2-135M's by 0.02 on average and 0.15 at most
(scripts/canary_tolerance.py, CPU), and Gaussian noise of 5 % of each weight tensor's spread already
needs a tolerance of 0.5 or more. The gpu profile's 0.3 (config.PROFILE_DEFAULTS) is twice the largest
delta measured on the CPU; bfloat16 vLLM on a GPU runs other kernels, so a GPU check must confirm it
(`scripts/canary_tolerance.py --device cuda`, and the engine's "canary within" info events of a real
gpu run, which record each sync's largest delta).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.errors import EngineError
from appliance.schemas import Event
from appliance.serving import process


@dataclass(frozen=True)
class Canary:
    """Greedy token ids with, per token, its log-probability and the runner-up (id, log-probability).

    `logprobs` and `runner_up` may be empty (only the ids are known): then only exact equality counts."""

    ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    runner_up: list[tuple[int, float]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any] | list[int]) -> Canary:
        """From the reference's JSON ({"ids", "logprobs", "runner_up"}) or a bare list of ids."""
        if isinstance(data, list):
            return cls([int(t) for t in data])
        return cls([int(t) for t in data["ids"]], [float(x) for x in data.get("logprobs", [])],
                   [(int(t), float(x)) for t, x in data.get("runner_up", [])])

    @classmethod
    def from_completion(cls, choice: dict[str, Any]) -> Canary:
        """From a vLLM completion choice asked with `logprobs=2, return_token_ids=True,
        return_tokens_as_token_ids=True` (top tokens spelled "token_id:N")."""
        ids = [int(t) for t in choice["token_ids"]]
        lp = choice.get("logprobs") or {}
        chosen = lp.get("token_logprobs") or []
        tops = lp.get("top_logprobs") or []
        if len(chosen) != len(ids) or len(tops) != len(ids) or any(x is None for x in chosen):
            return cls(ids)
        runner_up = []
        for token, top in zip(ids, tops):
            others = sorted(((float(v), int(k.rsplit(":", 1)[-1])) for k, v in (top or {}).items()
                             if int(k.rsplit(":", 1)[-1]) != token), reverse=True)
            runner_up.append((others[0][1], others[0][0]) if others else (-1, float("-inf")))
        return cls(ids, [float(x) for x in chosen], runner_up)

    @property
    def scored(self) -> bool:
        return len(self.logprobs) == len(self.ids) and len(self.runner_up) == len(self.ids)


@dataclass(frozen=True)
class Verdict:
    """The comparison's outcome: `ok`, the tokens compared, their largest and mean |delta logprob|, and
    what was wrong (or the near-tie that was accepted)."""

    ok: bool
    compared: int
    max_abs_delta: float
    mean_abs_delta: float
    detail: str

    def __bool__(self) -> bool:
        return self.ok

    def evidence(self, tolerance: float, offset: Offset | None) -> Event:
        """The info event of a sync that passed by distance: what keeps the gpu profile's tolerance honest."""
        removed = f", the engine's offset {offset.describe()} removed" if offset else ""
        return Event("info", f"canary within {tolerance} nats: max |delta logprob| {self.max_abs_delta:.4f} over "
                     f"{self.compared} tokens{removed}" + (f"; {self.detail}" if self.detail else ""),
                     data={"component": "engine", "max_abs_delta": self.max_abs_delta,
                           "mean_abs_delta": self.mean_abs_delta, "offset": offset.mean if offset else 0.0})


@dataclass(frozen=True)
class Offset:
    """How the engine's log-probabilities differ from the reference's on the same weights: the mean of
    engine minus reference over the tokens both chose alike, and the largest distance from that mean."""

    mean: float
    spread: float
    compared: int

    @classmethod
    def measure(cls, engine: Canary, reference: Canary) -> Offset | None:
        """None when nothing can be measured: no log-probabilities, or the first tokens already differ."""
        if not (engine.scored and reference.scored):
            return None
        deltas = []
        for i, (g, e) in enumerate(zip(engine.ids, reference.ids)):
            if g != e:
                break  # later tokens continue different contexts
            deltas.append(engine.logprobs[i] - reference.logprobs[i])
        if not deltas:
            return None
        mean = sum(deltas) / len(deltas)
        return cls(mean, max(abs(d - mean) for d in deltas), len(deltas))

    def describe(self) -> str:
        return f"{self.mean:+.4f} nats (spread {self.spread:.4f} over {self.compared} tokens)"


def compare(got: Canary, expected: Canary, tolerance: float, offset: Offset | None = None) -> Verdict:
    """Does the engine's canary `got` agree with `expected` within `tolerance` nats (0: exactly)?

    With an `offset` (the engine's, measured at the base) each delta is taken less its mean, and the spread
    measured there widens the tolerance; the reported deltas are the raw ones."""
    if tolerance <= 0 or not (got.scored and expected.scored):
        same = got.ids == expected.ids
        detail = "" if same else f"the engine generated {got.ids}, expected {expected.ids}"
        if not same and tolerance > 0:
            detail += " (no log-probabilities to compare, so the tokens must be equal)"
        return Verdict(same, len(got.ids) if same else 0, 0.0, 0.0, detail)
    if len(got.ids) != len(expected.ids):
        return Verdict(False, 0, 0.0, 0.0, f"the engine generated {len(got.ids)} tokens, expected {len(expected.ids)}")
    deltas: list[float] = []
    shift, allowed = (offset.mean, tolerance + offset.spread) if offset else (0.0, tolerance)
    beyond = f" beyond the engine's offset {offset.describe()}" if offset else ""

    def verdict(ok: bool, detail: str) -> Verdict:
        return Verdict(ok, len(deltas), max(deltas, default=0.0), sum(deltas) / len(deltas) if deltas else 0.0,
                       detail)

    for i, (g, e) in enumerate(zip(got.ids, expected.ids)):
        if g == e:
            delta = abs(got.logprobs[i] - expected.logprobs[i])
            deltas.append(delta)
            if abs(got.logprobs[i] - shift - expected.logprobs[i]) > allowed:
                return verdict(False, f"token {i} ({g}): log-probability {got.logprobs[i]:.4f} on the engine, "
                                      f"{expected.logprobs[i]:.4f} expected (|delta| {delta:.4f}{beyond} > "
                                      f"{allowed:.4g})")
            continue
        second, second_lp = expected.runner_up[i]
        margin = expected.logprobs[i] - second_lp
        if g != second:
            return verdict(False, f"token {i}: the engine chose {g}, expected {e} (runner-up {second})")
        delta = abs(got.logprobs[i] - second_lp)
        deltas.append(delta)
        if margin > allowed or abs(got.logprobs[i] - shift - second_lp) > allowed:
            return verdict(False, f"token {i}: the engine chose {g}, expected {e}; the expected top-2 margin "
                                  f"{margin:.4f} and |delta logprob| {delta:.4f}{beyond} must be <= {allowed:.4g}")
        return verdict(True, f"near-tie at token {i}: the engine chose the runner-up {g} over {e} "
                             f"(margin {margin:.4f} <= {allowed:.4g}); later tokens not compared")
    return verdict(True, "")


def reference(settings: Settings, full: Path, lora: Path | None, prompt: list[int]) -> Canary:
    """The trainer's greedy canary output for these weights, computed by transformers in a subprocess
    (serving never imports torch)."""
    cmd = [sys.executable, "-m", "appliance.training.reference", str(full),
           "--prompt-ids", ",".join(map(str, prompt)), "--n", str(settings.engine.canary_tokens)]
    if lora is not None:
        cmd += ["--adapter", str(lora)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**process.environment(settings), "LD_PRELOAD": ""})
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise EngineError(f"cannot compute the canary reference for {lora or full}: {tail[0]}",
                          "the checkpoint is unreadable or incomplete; save it again")
    return Canary.from_json(json.loads(done.stdout.strip().splitlines()[-1]))
