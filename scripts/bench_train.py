"""Benchmark one LEARN phase on the CPU: where a training step's time goes, and tokens per second.

    scripts/bench train [--groups 2] [--group-size 4] [--tokens 128] [--full] [--model PATH] [--processes N]
    scripts/bench train --memory [--methods grpo ppo] [--tokens 512]

Runs one LEARN phase of one GRPO step on synthetic multi-turn samples for the bundled
SmolLM2-135M-Instruct, time-sliced with the fake
engine (`appliance.testing.FakeEngine`: its pause and sync cost nothing, so the shares show the trainer's
own overhead: building the trainer from the checkpoint, saving the next one). For the real engine's costs
see ENVIRONMENT.md: LoRA adapter load ~0.03 s, full reload ~0.35-0.7 s, CPU engine start ~32 s.

`--processes N` runs the phase as `training.processes = N` (N workers launched through accelerate, gloo on
the CPU): "trainer build" is then the launch, the workers' imports and model load, and their exit. The
step-vs-baseline comparison always runs in this process.

Signal (always; no training): `--phases` simulated LEARN phases of `--signal-groups` groups of
`--group-size` rollouts whose tasks pass at `--pass-rate`, dealt over `--steps` steps by the product's own
code: the fraction of optimizer steps with a non-zero advantage to learn from (a step without one only
moves the weights on AdamW's momentum), before (every part stepped, no extra draws) and now (zero-variance
groups dropped, steps without signal not taken, the loop's bounded extra draws, `loop.extra_draws`).

`--gap` (heavy: starts the CPU vLLM engine; run it under the heavy lock): samples `--gap-samples`
completions of the bundled model at `--temperature` through the real engine, then scores the sampled
tokens with the trainer at T=1 (what the trainer computed before issue 15) and at the sampling
temperature (now). The engine serves processed logprobs, i.e. the behaviour policy's; the mean absolute
difference per token is the true engine/trainer gap the importance ratio corrects.

`--memory`: one LEARN phase of two steps per method (`--methods`, default grpo and ppo), each in a child
process of its own, on the same samples; prints each child's peak resident memory (the whole process: the
model, the trainer, the optimizer states, the critic's value head when the method has one) and the ratio of
each to the first method's, measured in the same run.

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
                                  [-2.0 * m for m in mask], 0))
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


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def signal_report(phases: int, groups: int, size: int, pass_rate: float, steps: int, extra_draws: int,
                  seed: int) -> dict:
    """Steps and groups with signal over `phases` simulated LEARN phases, dealt as the LEARN phase deals
    them (no model: the rewards are drawn at `pass_rate`, the dealing is the product's code)."""
    from appliance.phases import extra_draws_for
    from appliance.training.advantages import build_groups
    from appliance.training.learn import split_groups

    rng = random.Random(seed)
    before = {"steps_taken": 0, "steps_with_signal": 0, "groups_with_signal": 0, "phases_with_signal": 0}
    after = {"steps_taken": 0, "steps_with_signal": 0, "groups_with_signal": 0, "phases_with_signal": 0,
             "extra_rollouts": 0}
    for phase in range(phases):
        rollouts, samples = [], []
        for g in range(groups):
            rewards = [float(rng.random() < pass_rate) for _ in range(size)]
            # the loop's dynamic sampling: more draws while the group has no variance, up to the bound
            while extra := extra_draws_for(rewards, size, extra_draws):
                rewards += [float(rng.random() < pass_rate) for _ in range(extra)]
            after["extra_rollouts"] += len(rewards) - size
            for i, reward in enumerate(rewards):
                rid, gid = f"p{phase}-g{g}-{i}", f"p{phase}-g{g}"
                rollouts.append(Rollout(rid, "bench", "t", gid, 0, "builtin", 0, RolloutStatus.FINISHED,
                                        outcome=Outcome.SUCCESS if reward else Outcome.FAILURE, reward=reward))
                samples.append(Sample(rid, gid, 0, [1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], 0))
        first = {r.id for r in rollouts if int(r.id.rsplit("-", 1)[1]) < size}
        # before issue 15: the first group_size draws, every group dealt (zero-variance ones included),
        # every part stepped
        plain = build_groups([r for r in rollouts if r.id in first], [s for s in samples if s.rollout_id in first])
        parts = split_groups(plain, steps)
        with_signal = sum(any(s.advantage for s in p.samples) for p in parts)
        before["steps_taken"] += len(parts)
        before["steps_with_signal"] += with_signal
        before["groups_with_signal"] += plain.signal_groups
        before["phases_with_signal"] += plain.signal_groups > 0
        # now: extra draws, zero-variance groups dropped, only steps with signal taken
        kept = build_groups(rollouts, samples, keep_zero_std=False)
        parts = split_groups(kept, steps) if kept.samples else []
        after["steps_taken"] += len(parts)
        after["steps_with_signal"] += sum(any(s.advantage for s in p.samples) for p in parts)
        after["groups_with_signal"] += kept.signal_groups
        after["phases_with_signal"] += kept.signal_groups > 0
    for side in (before, after):
        side["fraction_of_steps_taken_with_signal"] = round(side["steps_with_signal"] / max(side["steps_taken"], 1), 3)
        side["fraction_of_asked_steps_with_signal"] = round(side["steps_with_signal"] / (phases * steps), 3)
        side["groups_with_signal_per_phase"] = round(side["groups_with_signal"] / phases, 2)
    after["extra_rollouts_per_phase"] = round(after.pop("extra_rollouts") / phases, 2)
    return {"phases": phases, "groups_per_phase": groups, "group_size": size, "pass_rate": pass_rate,
            "steps_asked": steps, "extra_draws": extra_draws, "before": before, "after": after}


def memory_child(args: argparse.Namespace) -> dict:
    """One LEARN phase of two steps with training.method = args.memory_child (run in a child of --memory)."""
    with tempfile.TemporaryDirectory(prefix="bench-train-") as home:
        settings = load_settings(environ={"APPLIANCE_HOME": home})
        settings.engine.model = args.model or load_settings().model_path
        settings.training.method = args.memory_child
        rollouts, samples = practice(args.groups, args.group_size, args.tokens, 0)
        t0 = time.perf_counter()
        result = learn(Store(settings.db_path), settings, FakeEngine(), rollouts, samples, run_id="bench",
                       iteration=0, steps=2)
        value_head = Path(home) / "checkpoints" / "v1" / "trainer" / "value_head.pt"
        return {"phase_wall_s": round(time.perf_counter() - t0, 2), "steps": len(result.steps),
                "value_head_bytes": value_head.stat().st_size if value_head.exists() else 0,
                "micro_batch_size": settings.training.micro_batch_size, "dtype": settings.training.dtype}


def memory_report(args: argparse.Namespace) -> dict:
    """Peak resident memory of one LEARN phase per method, each in a fresh child process."""
    import os
    import subprocess

    out: dict = {"samples": args.groups * args.group_size, "tokens_per_sample": args.tokens, "methods": {}}
    for method in args.methods:
        cmd = [sys.executable, __file__, "--memory-child", method, "--groups", str(args.groups),
               "--group-size", str(args.group_size), "--tokens", str(args.tokens)]
        if args.model:
            cmd += ["--model", str(args.model)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        stdout = proc.stdout.read() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"the {method} phase failed (exit {os.waitstatus_to_exitcode(status)})")
        out["methods"][method] = {**json.loads(stdout.strip().splitlines()[-1]),
                                  "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}  # ru_maxrss is KiB on Linux
    first = out["methods"][args.methods[0]]["peak_rss_mb"]
    out["peak_rss_vs_" + args.methods[0]] = {m: round(v["peak_rss_mb"] / first, 3) for m, v in out["methods"].items()}
    return out


def gap_report(settings, samples_n: int, temperature: float, tokens: int) -> dict:
    """The true engine/trainer gap at the sampling temperature, against the real CPU engine."""
    import httpx

    from appliance.serving import Engine
    from appliance.training.trainer import PolicyTrainer

    settings.engine.startup_timeout_s = max(settings.engine.startup_timeout_s, 900)  # a shared CPU is slow to start
    store = Store(settings.db_path)
    engine = Engine(settings, store)
    engine.start()
    try:
        prompt = engine.canary_prompt()
        drawn = []
        for seed in range(samples_n):
            r = httpx.post(f"{engine.base_url}/v1/completions", timeout=600, json={
                "model": engine.model_name(), "prompt": prompt, "max_tokens": tokens, "temperature": temperature,
                "seed": seed, "logprobs": 0, "return_token_ids": True})
            r.raise_for_status()
            choice = r.json()["choices"][0]
            drawn.append((choice["token_ids"], choice["logprobs"]["token_logprobs"]))
    finally:
        engine.stop()
        store.close()
    samples = [Sample(f"s{i}", "g", 0, prompt + ids, [0] * len(prompt) + [1] * len(ids),
                      [0.0] * len(prompt) + lps, 0, temperature=temperature) for i, (ids, lps) in enumerate(drawn)]
    trainer = PolicyTrainer(settings.training, settings.model_path)
    at_one, at_t = trainer.logps(samples, temperature=1.0), trainer.logps(samples)

    def gap(trainer_lps: list[list[float]]) -> tuple[float, float]:
        diffs = [t - s.logprobs[j] for s, lps in zip(samples, trainer_lps) for j, t in enumerate(lps) if s.mask[j]]
        return sum(abs(d) for d in diffs) / len(diffs), sum(diffs) / len(diffs)

    (before_abs, before_signed), (after_abs, after_signed) = gap(at_one), gap(at_t)
    return {"temperature": temperature, "samples": samples_n,
            "tokens": sum(sum(s.mask) for s in samples),
            "before_trainer_at_T1": {"mean_abs_gap_nats": round(before_abs, 4),
                                     "mean_signed_gap_nats": round(before_signed, 4)},
            "after_trainer_at_T": {"mean_abs_gap_nats": round(after_abs, 4),
                                   "mean_signed_gap_nats": round(after_signed, 4)}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128, help="tokens per sample")
    p.add_argument("--full", action="store_true", help="full fine-tune instead of LoRA")
    p.add_argument("--repeats", type=int, default=2, help="alternating GRPO / baseline steps for the ratio")
    p.add_argument("--model", type=Path, default=None, help="HF model folder (default: the bundled model)")
    p.add_argument("--processes", type=int, default=1, help="training.processes for the measured phase")
    p.add_argument("--signal-groups", type=int, default=8, help="synthetic groups per phase (loop.tasks_per_iteration)")
    p.add_argument("--phases", type=int, default=500, help="simulated LEARN phases for the signal fractions")
    p.add_argument("--pass-rate", type=float, default=0.1, help="task pass rate of the synthetic groups")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps the groups are dealt over (loop.train_steps)")
    p.add_argument("--extra-draws", type=int, default=None, help="loop.extra_draws (default: the setting's)")
    p.add_argument("--signal-only", action="store_true", help="only the signal fractions (no training)")
    p.add_argument("--gap", action="store_true", help="also measure the true engine/trainer gap (starts vLLM)")
    p.add_argument("--gap-samples", type=int, default=8)
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default harness.temperature)")
    p.add_argument("--memory", action="store_true", help="peak memory of one LEARN phase per method (child processes)")
    p.add_argument("--methods", nargs="+", default=["grpo", "ppo"], help="training.method values for --memory")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)  # one --memory measurement
    args = p.parse_args()
    if args.memory:
        print(json.dumps(memory_report(args), indent=2))
        return
    if args.memory_child:
        print(json.dumps(memory_child(args)))
        return
    defaults = load_settings()
    extra = defaults.loop.extra_draws if args.extra_draws is None else args.extra_draws
    signal = signal_report(args.phases, args.signal_groups, args.group_size, args.pass_rate, args.steps, extra, 0)
    if args.signal_only:
        print(json.dumps({"signal": signal}, indent=2))
        return

    with tempfile.TemporaryDirectory(prefix="bench-train-") as home:
        settings = load_settings(environ={"APPLIANCE_HOME": home})
        settings.engine.model = args.model or load_settings().model_path
        settings.training.full_finetune = args.full
        settings.training.method = "grpo"  # the GRPO step is what is measured, whatever the profile's default
        settings.training.processes = args.processes
        if not (settings.model_path / "config.json").exists():
            sys.exit(f"no model at {settings.model_path}; run `appliance init` (or pass --model)")
        if args.gap:  # the gap alone: the timing runs are minutes on a shared CPU
            settings.engine.port = free_port()
            gap = gap_report(settings, args.gap_samples, args.temperature or settings.harness.temperature, 32)
            print(json.dumps({"signal": signal, "gap": gap}, indent=2))
            return
        store, engine = Store(settings.db_path), FakeEngine()
        rollouts, samples = practice(args.groups, args.group_size, args.tokens, 0)
        t0 = time.perf_counter()
        result = learn(store, settings, engine, rollouts, samples, run_id="bench", iteration=0, steps=1)
        wall = time.perf_counter() - t0
        step_s, base_s, tokens_per_s = compare(settings, rollouts, samples, args.repeats)

    timings = result.timings
    # train_s holds the steps and, before them, the phase's one pi_old pass (freeze_old_logps, issue 15)
    step_s_sum = sum(step.get("step_time_s", 0.0) for step in result.steps)
    parts = {
        "sleep (pause)": timings.get("pause_s", 0.0),
        "trainer build": timings.get("load_s", 0.0),
        "old logprobs (pi_old pass)": max(0.0, timings.get("train_s", 0.0) - step_s_sum),
        "compute (GRPO step)": step_s_sum,
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
        "repeats": args.repeats, "signal": signal,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
