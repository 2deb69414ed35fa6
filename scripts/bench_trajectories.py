"""Tokens per second of the prefix-tree builder on 10k synthetic model calls.

500 rollouts of 20 calls each, shaped like agent work: a 300-token system prompt, completions of 20-150
tokens, observations of 20-400 tokens, with retries (5%), compactions (2%), template re-renders (3%) and
an interleaved sub-agent (5%). The baseline, measured in the same run, is one pass of a Python loop over
every token (what a per-token trie would pay at the very least); the builder compares prompts by C-level
slice bisection instead, so it should beat it.

    scripts/bench trajectories [--calls N]
"""

from __future__ import annotations

import argparse
import random
import time

from appliance.schemas import ModelCall
from appliance.trajectories import build_samples

CALLS_PER_ROLLOUT = 20


def synthetic_rollout(rng: random.Random, rid: str, n_calls: int) -> list[ModelCall]:
    def toks(lo: int, hi: int) -> list[int]:
        return [rng.randrange(49152) for _ in range(rng.randint(lo, hi))]

    system = toks(300, 300)
    main, sub = system + toks(30, 80), None
    calls: list[ModelCall] = []
    for seq in range(n_calls):
        r = rng.random()
        if sub is not None and r < 0.5:
            prompt = sub
        elif r < 0.05 and calls:
            prompt = calls[-1].prompt_ids  # retry
        elif r < 0.07:
            prompt = system + toks(50, 150)  # compaction
        elif r < 0.10:
            prompt = main[:-1] + toks(1, 3)  # the template re-renders the end of the last turn
        elif r < 0.15 and sub is None:
            sub = toks(100, 200)
            prompt = sub
        else:
            prompt = main
        completion = toks(20, 150)
        calls.append(ModelCall(None, rid, seq, "ok", {}, None, prompt, completion,
                               [-rng.random() for _ in completion], 1, 0.0))
        nxt = prompt + completion + toks(20, 400)
        if prompt is sub:
            sub = nxt
        else:
            main = nxt
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    args = ap.parse_args()
    rng = random.Random(0)
    rollouts = [synthetic_rollout(rng, f"r{i}", CALLS_PER_ROLLOUT)
                for i in range(max(1, args.calls // CALLS_PER_ROLLOUT))]
    n_calls = sum(len(r) for r in rollouts)
    tokens = sum(len(c.prompt_ids) + len(c.completion_ids) for r in rollouts for c in r)

    t0 = time.perf_counter()
    touched = 0
    for r in rollouts:
        for c in r:
            for _ in c.prompt_ids:
                touched += 1
            for _ in c.completion_ids:
                touched += 1
    baseline_s = time.perf_counter() - t0
    assert touched == tokens

    t0 = time.perf_counter()
    samples = branches = divergences = sampled = 0
    for r in rollouts:
        out, report = build_samples(r, rollout_id=r[0].rollout_id, group_id=None)
        samples += len(out)
        branches += report.branches
        divergences += len(report.divergences)
        sampled += report.sampled_tokens
    build_s = time.perf_counter() - t0

    print(f"calls {n_calls}  rollouts {len(rollouts)}  prompt+completion tokens {tokens}  sampled {sampled}")
    print(f"branches {branches}  divergences {divergences}  samples {samples}")
    print(f"builder  {build_s:.3f} s  {tokens / build_s:,.0f} tokens/s  {n_calls / build_s:,.0f} calls/s")
    print(f"baseline {baseline_s:.3f} s  {tokens / baseline_s:,.0f} tokens/s  (Python loop over every token)")
    print(f"builder / baseline time: {build_s / baseline_s:.1f}x")


if __name__ == "__main__":
    main()
