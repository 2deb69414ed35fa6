"""How far a bfloat16 copy of a model strays from its float32 self on the canary: the measurement behind
`engine.canary_tolerance` (appliance/serving/canary.py).

    python scripts/canary_tolerance.py [--model DIR] [--tokens 32] [--device cpu|cuda] [--noise 0.01,0.05]

On the gpu profile the engine serves bfloat16 while the canary's reference (appliance.training.reference)
is float32 transformers. Per prompt this script takes the float32 greedy continuation and reads, with
the same weights in bfloat16 (transformers, teacher-forced on the float32 tokens):
  - |delta logprob| of each greedy token (float32 minus bfloat16, both log-softmax at T=1),
  - where the bfloat16 argmax differs from the float32 token (a flip) and the float32 top-2 margin there,
  - the first position where free bfloat16 greedy decoding leaves the float32 tokens,
and, as the "real divergence" the canary must still catch, the same numbers for float32 weights with
Gaussian noise of `--noise` x each tensor's standard deviation. Prints one JSON object.

bfloat16 transformers on the CPU is a stand-in for bfloat16 vLLM on a GPU (same rounded weights, other
kernels); the GPU device check must confirm the numbers there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.serving.canary import Canary, compare  # noqa: E402

DEFAULT_MODEL = Path.home() / ".local/share/appliance/models/SmolLM2-135M-Instruct"
PROMPTS = [
    None,  # the engine's own canary text, as /tokenize gives it (no chat template)
    "List the files in the current directory, largest first.",
    "Count the lines of every .log file under /var/log and print the total.",
    "Write a bash one-liner that replaces tabs with four spaces in data.tsv.",
    "Explain what `git rebase -i HEAD~3` does.",
    "The capital of France is",
    "def fibonacci(n):",
    "Fix the failing test in tests/test_parse.py: the parser drops the last field.",
]


def trajectories(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from appliance.serving.engine import CANARY_TEXT

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(args.model))
    fp32 = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.float32).to(args.device).eval()
    bf16 = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.bfloat16).to(args.device).eval()
    noisy = {}
    for scale in args.noise:
        m = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.float32).to(args.device).eval()
        with torch.no_grad():
            for p in m.parameters():
                if p.numel() > 1:
                    p.add_(torch.randn_like(p) * p.std() * scale)
        noisy[scale] = m

    def prompt_ids(text: str | None) -> list[int]:
        if text is None:
            return tok(CANARY_TEXT, add_special_tokens=True)["input_ids"]
        chat = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        return tok(chat, add_special_tokens=False)["input_ids"]

    def greedy(model, ids: list[int], n: int) -> list[int]:
        """Plain argmax with a KV cache, eos not suppressed (as the reference and the engine's ignore_eos)."""
        out: list[int] = []
        past, step = None, torch.tensor([ids], device=args.device)
        with torch.inference_mode():
            for _ in range(n):
                result = model(input_ids=step, past_key_values=past, use_cache=True)
                past = result.past_key_values
                out.append(int(result.logits[0, -1].argmax()))
                step = torch.tensor([[out[-1]]], device=args.device)
        return out

    def scores(model, ids: list[int], cont: list[int]):
        """Teacher-forced log-softmax (float32) at each continuation position."""
        with torch.inference_mode():
            logits = model(torch.tensor([ids + cont], device=args.device)).logits[0, len(ids) - 1:-1]
        return torch.log_softmax(logits.float(), -1)

    def compare(model, ids: list[int], cont: list[int], ref) -> dict:
        lp = scores(model, ids, cont)
        chosen = torch.tensor(cont, device=args.device)
        ref_chosen = ref.gather(-1, chosen[:, None])[:, 0]
        got_chosen = lp.gather(-1, chosen[:, None])[:, 0]
        delta = (ref_chosen - got_chosen).abs().tolist()
        top2 = ref.topk(2, -1)
        ref_margin = (top2.values[:, 0] - top2.values[:, 1]).tolist()
        got_top2 = lp.topk(2, -1)
        margin_delta = ((top2.values[:, 0] - top2.values[:, 1]) -
                        (lp.gather(-1, top2.indices)[:, 0] - lp.gather(-1, top2.indices)[:, 1])).abs().tolist()
        flips = [{"position": i, "ref_margin": ref_margin[i]} for i in range(len(cont))
                 if int(got_top2.indices[i, 0]) != cont[i]]
        free = greedy(model, ids, len(cont))
        first = next((i for i, (a, b) in enumerate(zip(free, cont)) if a != b), None)
        # the canary itself: this model's free greedy canary against the float32 reference's
        needed = needed_tolerance(canary_of(scores(model, ids, free), free), canary_of(ref, cont))
        return {"delta": delta, "margin_delta": margin_delta, "flips": flips, "first_divergence": first,
                "first_divergence_ref_margin": ref_margin[first] if first is not None else None,
                "ref_margins": ref_margin, "needed_tolerance": needed}

    def canary_of(lp, cont: list[int]) -> Canary:
        top = lp.topk(2, -1)
        chosen = lp.gather(-1, torch.tensor(cont, device=args.device)[:, None])[:, 0].tolist()
        runner = [(int(top.indices[i, 1 if int(top.indices[i, 0]) == t else 0]),
                   float(top.values[i, 1 if int(top.indices[i, 0]) == t else 0])) for i, t in enumerate(cont)]
        return Canary(cont, chosen, runner)

    rows = []
    for text in PROMPTS:
        ids = prompt_ids(text)
        with torch.inference_mode():
            cont = greedy(fp32, ids, args.tokens)
        ref = scores(fp32, ids, cont)
        row = {"prompt": text or "CANARY_TEXT", "bf16": compare(bf16, ids, cont, ref)}
        for scale, m in noisy.items():
            row[f"noise {scale}"] = compare(m, ids, cont, ref)
        rows.append(row)
    return {"rows": rows}


def needed_tolerance(got: Canary, expected: Canary) -> float | None:
    """The smallest tolerance at which `compare` accepts `got` (None: no tolerance up to 5 nats does)."""
    low, high = 0.0, 5.0  # bisection: acceptance only grows with the tolerance (> 0 compares log-probabilities)
    if not compare(got, expected, high):
        return None
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (low, mid) if compare(got, expected, mid) else (mid, high)
    return high


def summary(rows: list[dict], key: str) -> dict:
    delta = sorted(d for r in rows for d in r[key]["delta"])
    mdelta = sorted(d for r in rows for d in r[key]["margin_delta"])
    canary = [r for r in rows if r["prompt"] == "CANARY_TEXT"][0][key]

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]

    return {
        "tokens": len(delta),
        "abs_delta_logprob": {"mean": statistics.fmean(delta), "p50": q(delta, 0.5), "p90": q(delta, 0.9),
                              "p99": q(delta, 0.99), "max": delta[-1]},
        "abs_delta_top2_margin": {"mean": statistics.fmean(mdelta), "p99": q(mdelta, 0.99), "max": mdelta[-1]},
        "per_prompt_max_abs_delta": [round(max(r[key]["delta"]), 5) for r in rows],
        "per_prompt_mean_abs_delta": [round(statistics.fmean(r[key]["delta"]), 5) for r in rows],
        "flips": [f for r in rows for f in r[key]["flips"]],
        "first_divergence": [(r[key]["first_divergence"], r[key]["first_divergence_ref_margin"]) for r in rows],
        "needed_tolerance_per_prompt": [None if r[key]["needed_tolerance"] is None
                                        else round(r[key]["needed_tolerance"], 4)
                                        for r in rows],
        "canary_prompt": {"max_abs_delta": max(canary["delta"]), "first_divergence": canary["first_divergence"],
                          "min_ref_margin": min(canary["ref_margins"])},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--noise", default="0.01,0.02,0.05", help="comma-separated noise scales (x tensor std)")
    args = parser.parse_args()
    args.noise = [float(s) for s in args.noise.split(",") if s]
    rows = trajectories(args)["rows"]
    out = {"model": str(args.model), "tokens_per_prompt": args.tokens, "prompts": len(rows), "device": args.device,
           "bf16": summary(rows, "bf16")}
    for scale in args.noise:
        out[f"noise {scale}"] = summary(rows, f"noise {scale}")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
