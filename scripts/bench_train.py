"""Benchmark one LEARN phase on the CPU: where a training step's time goes, and tokens per second.

    scripts/bench train [--groups 2] [--group-size 4] [--tokens 128] [--full] [--model PATH] [--processes N]

Runs one LEARN phase of one GRPO step on synthetic multi-turn samples for the bundled
SmolLM2-135M-Instruct, time-sliced with the fake
engine (`appliance.testing.FakeEngine`: its pause and sync cost nothing, so the shares show the trainer's
own overhead: building the trainer from the checkpoint, saving the next one). For the real engine's costs
see ENVIRONMENT.md: LoRA adapter load ~0.03 s, full reload ~0.35-0.7 s, CPU engine start ~32 s.

`--processes N` runs the phase as `training.processes = N` (N workers launched through accelerate, gloo on
the CPU): "trainer build" is then the launch, the workers' imports and model load, and their exit. The
step-vs-baseline comparison always runs in this process.

Baseline, measured in the same run on the same batch: a plain forward + backward + AdamW step of the
model with a masked cross-entropy (no importance sampling, no statistics). Our step and the baseline run
alternately, `--repeats` times each on one trainer, and the minimum of each is compared, so that load
from other processes on a shared machine distorts the ratio less.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.config import load_settings  # noqa: E402
from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample  # noqa: E402
from appliance.store import Store  # noqa: E402
from appliance.testing import FakeEngine  # noqa: E402
from appliance.training.learn import learn  # noqa: E402


def practice(groups: int, size: int, tokens: int, seed: int) -> tuple[list[Rollout], list[Sample]]:
    """Multi-turn samples: a prompt, then 3 assistant turns separated by tool output (mask ~45% ones)."""
    rng = random.Random(seed)
    turn = tokens // 8
    mask = [0] * (2 * turn) + ([1] * turn + [0] * turn) * 2 + [1] * turn
    mask += [0] * (tokens - len(mask))
    rollouts, samples = [], []
    for g in range(groups):
        for i in range(size):
            rid, reward = f"s{seed}-g{g}-{i}", float(rng.random() < 0.5)
            rollouts.append(Rollout(rid, "bench", "t", f"s{seed}-g{g}", 0, "builtin", 0, RolloutStatus.FINISHED,
                                    outcome=Outcome.SUCCESS if reward else Outcome.FAILURE, reward=reward))
            samples.append(Sample(rid, f"s{seed}-g{g}", 0, [rng.randrange(100, 40000) for _ in mask], mask,
                                  [-2.0 * m for m in mask], reward, 0))
    return rollouts, samples


def baseline_step(trainer, samples: list[Sample]) -> float:
    """Seconds for a plain masked-CE forward+backward+AdamW step over the same samples (same micro-batches)."""
    import torch

    mb = trainer.cfg.micro_batch_size
    t0 = time.perf_counter()
    trainer.model.train()
    trainer.optimizer.zero_grad()
    for i in range(0, len(samples), mb):
        b = trainer.pack(samples[i: i + mb])
        logits = trainer.model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1].float()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), b.input_ids[:, 1:], reduction="none")
        ((ce * b.mask).sum() / b.mask.sum()).backward()
    trainer.optimizer.step()
    return time.perf_counter() - t0


def compare(settings, rollouts: list[Rollout], samples: list[Sample], repeats: int) -> tuple[float, float, float]:
    """(min GRPO step s, min baseline s, tokens/s of the fastest GRPO step), alternating the two."""
    from appliance.training.advantages import build_groups
    from appliance.training.trainer import PolicyTrainer

    trainer = PolicyTrainer(settings.training, settings.model_path)
    batch = build_groups(rollouts, samples)
    ours, base, best = [], [], {}
    for _ in range(repeats):
        m = trainer.grpo_step(batch)
        ours.append(m["step_time_s"])
        best = m if m["step_time_s"] == min(ours) else best
        base.append(baseline_step(trainer, batch.samples))
    return min(ours), min(base), best["tokens_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128, help="tokens per sample")
    p.add_argument("--full", action="store_true", help="full fine-tune instead of LoRA")
    p.add_argument("--repeats", type=int, default=2, help="alternating GRPO / baseline steps for the ratio")
    p.add_argument("--model", type=Path, default=None, help="HF model folder (default: the bundled model)")
    p.add_argument("--processes", type=int, default=1, help="training.processes for the measured phase")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-train-") as home:
        settings = load_settings(environ={"APPLIANCE_HOME": home})
        settings.engine.model = args.model or load_settings().model_path
        settings.training.full_finetune = args.full
        settings.training.method = "grpo"  # the GRPO step is what is measured, whatever the profile's default
        settings.training.processes = args.processes
        if not (settings.model_path / "config.json").exists():
            sys.exit(f"no model at {settings.model_path}; run `appliance init` (or pass --model)")
        store, engine = Store(settings.db_path), FakeEngine()
        rollouts, samples = practice(args.groups, args.group_size, args.tokens, 0)
        t0 = time.perf_counter()
        result = learn(store, settings, engine, rollouts, samples, run_id="bench", iteration=0, steps=1)
        wall = time.perf_counter() - t0
        step_s, base_s, tokens_per_s = compare(settings, rollouts, samples, args.repeats)

    timings = result.timings
    parts = {
        "sleep (pause)": timings.get("pause_s", 0.0),
        "trainer build": timings.get("load_s", 0.0),
        "compute (GRPO step)": timings.get("train_s", 0.0),
        "checkpoint save": timings.get("save_s", 0.0),
        "sync + wake + canary (fake engine)": timings.get("sync_s", 0.0),
    }
    total = sum(parts.values())
    report = {
        "model": str(settings.model_path), "mode": "full" if args.full else "lora", "processes": args.processes,
        "samples": len(samples), "tokens_per_sample": args.tokens,
        "trained_tokens": result.steps[-1]["trained_tokens"], "phase_wall_s": round(wall, 3),
        "shares": {k: round(v / total, 3) for k, v in parts.items()},
        "seconds": {k: round(v, 3) for k, v in parts.items()},
        "tokens_per_s": round(tokens_per_s, 1), "grpo_step_s_min": round(step_s, 3),
        "baseline_ce_step_s_min": round(base_s, 3), "step_vs_baseline": round(step_s / base_s, 2),
        "repeats": args.repeats,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
