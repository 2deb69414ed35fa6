"""Benchmark the warm-start SFT of the first LEARN phase on the CPU: seconds per demonstration and epoch, where
they go, and what the phase does to the loss on demonstrations it did not train on.

    scripts/bench warmstart [--per 2] [--levels 2 3 4] [--epochs 1] [--val-per 1] [--families F ...]
                            [--profile N] [--set K=V ...]

Demonstrations: `--per` training tasks per family and level, synthesized by the families (train split) and
rendered exactly as `appliance.demonstrations` renders a reference run (system prompt, `Task: ...`, the
solution in a ```bash block, the observation, `DONE`), tokenized with the bundled model's chat template.
No sandbox runs: the observation is the harness's line for a silent success ("exit code 0 (no output)"),
which is what most reference solutions print, so the sequence lengths are the real ones within a few tokens.

What is printed (JSON): the trainer's settings that matter (micro-batch, LoRA rank, threads), the phase's
wall seconds and seconds per sample-epoch, optimizer steps, and the mean NLL per assistant token of
`--val-per` other tasks per family and level (same families and levels, other tasks: never the held-out
set) before and after the phase. `--dev-phrasing K` makes the validation tasks a phrasing the phase never
trained on (K among the training phrasings 0-2; the held-out set's phrasing 3 stays unread), a proxy for
transfer to unseen wording. `--profile N` instead runs N samples of the phase under torch's profiler
and prints the top operators by self CPU time. `--set training.KEY=VALUE` changes a training setting.
`--families` trains on those families only (validation keeps every family).

`--demos-from HOME ...` trains instead on every verified demonstration in those runs' stores (finished
`scripts/bench learning` homes: the reference runs, hindsight relabels and successes each run validated
and kept, deduplicated by content), the capacity question: how far does SFT alone on many more of the
appliance's own demonstrations move the dev set? `--save DIR` writes the trained policy where
`scripts/bench checkpoint --model DIR` measures its pass@1.

The transfer dev set (appliance/tasks/devset) is read too, never trained on: its reference solutions,
rendered the same way, give `dev_nll_before` / `dev_nll_after` per category, the cheap proxy for choosing
what to train on before a 2-hour `scripts/bench learning` run measures pass@1 on it.

Run it under `flock /tmp/appliance-heavy.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.config import load_settings  # noqa: E402
from appliance.schemas import Demonstration, Sample  # noqa: E402
from appliance.tasks.format import TaskSpec  # noqa: E402

SILENT_SUCCESS = "exit code 0 (no output)"


def demo_samples(model_path: Path, per: int, levels: list[int], seed: str,
                 keep: Callable[[TaskSpec], bool] = lambda _: True, families: list[str] | None = None) -> list[Sample]:
    from appliance.tasks.families import FAMILIES, synthesize

    specs = [spec for family in (families or FAMILIES) for level in levels
             for spec in [t for t in synthesize(family, level, 6 * per, seed=seed) if keep(t)][:per]]
    return rendered(model_path, specs)


def rendered(model_path: Path, specs: list[TaskSpec]) -> list[Sample]:
    """Each task's reference as the built-in harness would show it: one block, a silent success, DONE."""
    from appliance.demonstrations import FINISH, chat_tokenizer, command_block, digest
    from appliance.harness.builtin import first_messages, request_of

    tokenize = chat_tokenizer(model_path)
    out = []
    for spec in specs:
        messages = first_messages(request_of(spec.instruction, spec.answer)) + [
            {"role": "assistant", "content": command_block(spec.solution)},
            {"role": "user", "content": f"Output: {SILENT_SUCCESS}"},
            {"role": "assistant", "content": FINISH}]
        out += Demonstration.of_sequences(tokenize(messages), run_id=None, task_id=spec.id, family=spec.family,
                                          difficulty=spec.difficulty, origin="reference", messages=messages,
                                          digest=digest(messages)).to_samples()
    return out


def pooled_demonstrations(homes: list[Path]) -> list[Demonstration]:
    """Every demonstration stored by the latest run of each home, once per distinct content."""
    from appliance.store import Store

    unique: dict[str, Demonstration] = {}
    for home in homes:
        db = home / "appliance.db"
        store = Store(db) if db.is_file() else None  # Store() would create a database where none is
        run = store.latest_run() if store is not None else None
        demos = store.demonstrations(run.id) if store is not None and run is not None else []
        if not demos:
            raise SystemExit(f"no stored demonstrations in {home}: --demos-from takes the --home folders of "
                             "finished `scripts/bench learning` runs")
        for demo in demos:
            unique.setdefault(demo.digest, demo)
    return list(unique.values())


def nll(trainer, samples: list[Sample]) -> float:
    """Mean negative log-likelihood per assistant token (the SFT loss, without training)."""
    total, n = 0.0, 0
    for s, lps in zip(samples, trainer.logps(samples), strict=True):
        for j, m in enumerate(s.mask[1:], start=1):
            if m:
                total -= lps[j]
                n += 1
    return total / max(n, 1)


def nll_by_family(trainer, samples: list[Sample], families: list[str]) -> dict[str, float]:
    """The NLL of all samples ("all") and of each family's (`families[i]` is sample i's)."""
    return {"all": round(nll(trainer, samples), 4),
            **{f: round(nll(trainer, [s for s, g in zip(samples, families, strict=True) if g == f]), 4)
               for f in sorted(set(families))}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per", type=int, default=2, help="training demonstrations per family and level")
    p.add_argument("--levels", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--epochs", type=float, default=1.0, help="SFT epochs of the measured phase")
    p.add_argument("--val-per", type=int, default=1, help="validation demonstrations per family and level")
    p.add_argument("--dev-phrasing", type=int, default=None, metavar="K",
                   help="train on the other phrasings and validate on phrasing K only (a training phrasing, 0-2: "
                        "a proxy for the held-out set's unseen phrasings that never reads it)")
    p.add_argument("--families", nargs="+", default=None, help="train on these families only (default: all)")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile N samples instead of timing")
    p.add_argument("--set", action="append", default=[], metavar="training.KEY=VALUE")
    p.add_argument("--demos-from", nargs="+", type=Path, default=None, metavar="HOME",
                   help="train on the verified demonstrations of these runs' stores instead of synthesized ones")
    p.add_argument("--save", type=Path, default=None, metavar="DIR", help="write the trained policy to DIR")
    args = p.parse_args()

    import torch

    from appliance.training.sft import sft
    from appliance.training.trainer import PolicyTrainer

    settings = load_settings(environ={"APPLIANCE_HOME": "/tmp/appliance-bench-warmstart"})
    settings.engine.model = load_settings().model_path
    settings.training.sft_epochs = args.epochs
    for kv in args.set:
        key, _, value = kv.partition("=")
        section, _, name = key.partition(".")
        field = type(getattr(settings, section)).model_fields[name]
        setattr(getattr(settings, section), name, json.loads(value) if field.annotation is not str else value)
    k = args.dev_phrasing
    pooled = pooled_demonstrations(args.demos_from) if args.demos_from else []
    if args.demos_from:
        train = [s for d in pooled for s in d.to_samples()]
    else:
        train = demo_samples(settings.model_path, args.per, args.levels, "bench:warmstart:train",
                             keep=lambda t: k is None or t.meta.get("phrasing") != k, families=args.families)
    val_ids = {s.rollout_id for s in train}
    val = [s for s in demo_samples(settings.model_path, args.val_per, args.levels, "bench:warmstart:val",
                                   keep=lambda t: k is None or t.meta.get("phrasing") == k)
           if s.rollout_id not in val_ids]
    from appliance.tasks.devset import devset_tasks

    dev_specs = devset_tasks()
    if args.demos_from:  # the stores' triggers keep dev tasks out; this also catches a request copied into a family
        trained_text = [" ".join(str(m.get("content")) for m in d.messages) for d in pooled]
        leaked = [t.id for t in dev_specs + devset_tasks("second")
                  if any(t.instruction in text for text in trained_text)]
        if leaked:
            raise SystemExit(f"dev-set requests found in the pooled demonstrations: {leaked}")
    dev, dev_families = rendered(settings.model_path, dev_specs), [t.family for t in dev_specs]
    trainer = PolicyTrainer(settings.training, settings.model_path)
    cfg = trainer.cfg
    info = {"samples": len(train), "tokens_mean": round(sum(len(s.token_ids) for s in train) / len(train), 1),
            "trained_tokens_mean": round(sum(sum(s.mask) for s in train) / len(train), 1),
            "micro_batch_size": cfg.micro_batch_size, "lora_rank": cfg.lora_rank, "full_finetune": cfg.full_finetune,
            "dtype": cfg.dtype, "torch_threads": torch.get_num_threads(), "epochs": args.epochs}
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            sft(trainer, train[: args.profile])
            wall = time.perf_counter() - t0
        print(json.dumps({**info, "profiled_samples": args.profile, "wall_s": round(wall, 2)}))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        return
    before, dev_before = nll(trainer, val), nll_by_family(trainer, dev, dev_families)
    t0 = time.perf_counter()
    metrics = sft(trainer, train)
    wall = time.perf_counter() - t0
    after, dev_after = nll(trainer, val), nll_by_family(trainer, dev, dev_families)
    print(json.dumps({**info, "wall_s": round(wall, 1),
                      "s_per_sample_epoch": round(wall / (len(train) * args.epochs), 3),
                      "sft_steps": metrics["sft_steps"], "sft_loss": round(metrics["sft_loss"], 4),
                      "val_samples": len(val), "val_nll_before": round(before, 4), "val_nll_after": round(after, 4),
                      "dev_samples": len(dev), "dev_nll_before_after": {f: [dev_before[f], dev_after[f]]
                                                                        for f in dev_before},
                      "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}, indent=2))
    if args.save:
        print(json.dumps({"saved": str(args.save), "kind": trainer.save(args.save)}))


if __name__ == "__main__":
    main()
