"""The trainer's own greedy output for given weights: the expected answer of the engine's canary.

After every weight sync the engine greedily generates a few tokens of a fixed prompt; they must agree
with what transformers computes here for the same weights (float32, no sampling, no early stop), else
the engine is not serving the weights the trainer trained: exactly on the cpu profile, within
`engine.canary_tolerance` nats per token on the gpu profile (appliance.serving.canary). Run as a module
it prints the ids with their log-probabilities and runner-ups as JSON, so the engine (which must not
import torch) calls it in a subprocess:

    python -m appliance.training.reference MODEL_DIR --prompt-ids 1,2,3 --n 16 [--adapter DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def greedy_token_ids(model_path: Path | str, prompt_ids: list[int], n_tokens: int,
                     adapter_path: Path | str | None = None) -> list[int]:
    """`n_tokens` greedy continuation ids of `prompt_ids` (eos does not stop it: the engine ignores eos too)."""
    return greedy_canary(model_path, prompt_ids, n_tokens, adapter_path)["ids"]


def greedy_canary(model_path: Path | str, prompt_ids: list[int], n_tokens: int,
                  adapter_path: Path | str | None = None) -> dict[str, Any]:
    """The greedy continuation with, per token, its log-probability (log-softmax at T=1, float32) and the
    runner-up [id, log-probability]: {"ids", "logprobs", "runner_up"}, as appliance.serving.canary reads it."""
    import torch  # heavy: only when a canary is checked
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    if adapter_path is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_path)).merge_and_unload()
    model.eval()
    ids = torch.tensor([prompt_ids])
    out: dict[str, Any] = {"ids": [], "logprobs": [], "runner_up": []}
    with torch.inference_mode():
        past = None
        step_input = ids
        for _ in range(n_tokens):
            result = model(input_ids=step_input, past_key_values=past, use_cache=True)
            past = result.past_key_values
            top = torch.log_softmax(result.logits[0, -1].float(), -1).topk(2)
            nxt = int(top.indices[0])
            out["ids"].append(nxt)
            out["logprobs"].append(float(top.values[0]))
            out["runner_up"].append([int(top.indices[1]), float(top.values[1])])
            step_input = torch.tensor([[nxt]])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--adapter", default=None)
    args = parser.parse_args(argv)
    prompt = [int(t) for t in args.prompt_ids.split(",") if t]
    print(json.dumps(greedy_canary(args.model, prompt, args.n, args.adapter)))


if __name__ == "__main__":
    main()
