"""Time to open each TUI screen, and the cost of one refresh, on a store with 100k rollouts and 1M model
calls, against the same on the small recorded run (the baseline, measured in the same run).

The big store: 10 iterations × 10,000 rollouts in GRPO groups of 8, 10 model calls per rollout (prompts of
64-512 tokens, completions of 16-64), 5,000 tasks, 20,000 events, 2,000 metric steps. It is written with
the store's bulk loads (one transaction per chunk) and kept with --keep PATH for the next run.

"Open" is key press → data on screen (Pilot, headless, 80×24). "Refresh" is one `load()` of the screen
(the store reads a timer tick does, off the UI thread) averaged over 5 calls.

    scripts/bench tui [--rollouts 100000] [--calls-per-rollout 10] [--keep PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from appliance.schemas import (
    CapabilityReport,
    Event,
    IterationStatus,
    ModelCall,
    Outcome,
    Phase,
    Rollout,
    RolloutStatus,
    Split,
    Task,
    TaskStatus,
)
from appliance.store import Store
from appliance.tui.app import ApplianceApp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from recorded_run import T0, record_run, toy_decoder  # noqa: E402  (tests/recorded_run.py)

ITERATIONS = 10
GROUP = 8
CHUNK = 50_000
SCREENS = [("overview", "1"), ("tasks", "2"), ("rollouts", "3"), ("reports", "4"), ("controls", "5"), ("curves", "6")]


def fill_big(store: Store, n_rollouts: int, calls_per_rollout: int) -> None:
    rng = random.Random(0)
    run = "big"
    store.create_run(run, {"profile": "bench"})
    families = [f"family{i}" for i in range(20)]
    statuses = list(TaskStatus)
    tasks = [Task(f"t{i}", run, families[i % 20], 1 + i % 5, "procedural",
                  Split.HELDOUT if i % 10 == 0 else Split.TRAIN,
                  statuses[i % len(statuses)], {"instruction": f"task {i}", "verify": "true", "solution": "true"},
                  created_at=T0 + i) for i in range(5000)]
    for t in tasks:
        store.add_task(t)
    per_it = n_rollouts // ITERATIONS
    for it in range(ITERATIONS):
        store.start_iteration(run, it, policy_version=it)
        for phase in Phase:
            if phase != Phase.DONE:
                store.add_event(Event("phase", str(phase), run, {"iteration": it}, created_at=T0 + it * 1000))
        if it < ITERATIONS - 1:
            store.set_iteration_phase(run, it, Phase.DONE)
            store.set_iteration_status(run, it, IterationStatus.DONE)
            lines = "\n".join(f"- line {j}: {rng.random():.3f}" for j in range(200))
            store.save_report(run, it, CapabilityReport(), f"# report {it}\n\n{lines}")
        for f in families:
            store.set_eval(run, it, it, f, 1, 20, rng.randrange(21))
    outcomes = list(Outcome)

    def train_task(group: int) -> int:  # the store refuses a training rollout of a held-out task (every 10th)
        t = group % 5000
        return t + 1 if t % 10 == 0 else t

    def rollouts():
        for i in range(n_rollouts):
            it = min(i // per_it, ITERATIONS - 1)
            done = it < ITERATIONS - 1 or i % 3
            outcome = outcomes[i % 4] if done else None
            yield Rollout(f"r{i:07d}", run, f"t{train_task(i // GROUP)}", f"g{it}-{i // GROUP:06d}", it,
                          "bash-agent", it, RolloutStatus.FINISHED if done else RolloutStatus.RUNNING, "train", outcome,
                          1.0 if outcome == Outcome.SUCCESS else 0.0 if done else None, None, calls_per_rollout,
                          created_at=T0 + i)

    def calls(lo: int, hi: int):
        for i in range(lo, hi):
            prompt = [rng.randrange(49152) for _ in range(64)]
            for seq in range(calls_per_rollout):
                completion = [rng.randrange(49152) for _ in range(16 + seq * 5)]
                yield ModelCall(None, f"r{i:07d}", seq, "ok", {"model": "policy"}, None, prompt, completion,
                                [-0.5] * len(completion), 0, 0.2, created_at=T0 + i)
                prompt = prompt + completion + [rng.randrange(49152) for _ in range(20)]

    store.add_rollouts(rollouts())
    for lo in range(0, n_rollouts, CHUNK // calls_per_rollout):
        store.add_model_calls(calls(lo, min(n_rollouts, lo + CHUNK // calls_per_rollout)))
    for step in range(2000):
        store.add_metrics(run, step, {"reward_mean": rng.random(), "infra_error_rate": rng.random() / 10,
                                       "loss": rng.random(), "sft_loss": rng.random()})
    for i in range(20_000):
        store.add_event(Event("info", f"event {i}", run, {}, created_at=T0 + i))


async def measure(store: Store) -> dict[str, tuple[float, float]]:
    """Per screen: (median seconds to open, mean seconds of one refresh load)."""
    app = ApplianceApp(lambda: store, probe=lambda: "CPU", decoder_factory=lambda: toy_decoder, refresh_s=3600)
    results: dict[str, tuple[float, float]] = {}
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screens = SCREENS + [("trajectory", None)]
        for name, key in screens:
            opens = []
            for _ in range(3):
                t = time.perf_counter()
                if key is None:
                    await pilot.press("3")
                    await settle(pilot)
                    t = time.perf_counter()
                    await pilot.press("tab", "enter")
                else:
                    await pilot.press(key)
                await settle(pilot)
                opens.append(time.perf_counter() - t)
                if key is None:
                    await pilot.press("escape")
                    await settle(pilot)
                    await pilot.press("shift+tab")
                else:
                    await pilot.press("5" if key != "5" else "1")
                await settle(pilot)
            if key is None:
                await pilot.press("3", "tab", "enter")
                await settle(pilot)
                screen = app.screen
                load = screen.load
            else:
                await pilot.press(key)
                await settle(pilot)
                screen = app.screen
                load = screen._load
            t = time.perf_counter()
            for _ in range(5):
                await asyncio.to_thread(load)
            results[name] = (statistics.median(opens), (time.perf_counter() - t) / 5)
            if key is None:
                await pilot.press("escape")
                await settle(pilot)
    return results


async def settle(pilot) -> None:
    for _ in range(3):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=100_000)
    ap.add_argument("--calls-per-rollout", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, help="reuse (or create) the big store at this path")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = Store(Path(tmp) / "small.db")
        record_run(small)
        big_path = args.keep or Path(tmp) / "big.db"
        fresh = not big_path.exists()
        big = Store(big_path)
        if fresh:
            t = time.perf_counter()
            fill_big(big, args.rollouts, args.calls_per_rollout)
            print(f"filled the big store in {time.perf_counter() - t:.1f} s "
                  f"({big_path.stat().st_size / 2**20:.0f} MiB)")
        counts = big.counts()
        print(f"big store: {counts['rollouts']:,} rollouts, {counts['model_calls']:,} model calls, "
              f"{counts['tasks']:,} tasks, {counts['events']:,} events")
        base = asyncio.run(measure(small))
        large = asyncio.run(measure(big))
    print(f"{'screen':<11} {'open small':>11} {'open big':>9} {'ratio':>6} {'refresh small':>14} "
          f"{'refresh big':>12} {'ratio':>6}")
    for name in base:
        (o0, r0), (o1, r1) = base[name], large[name]
        print(f"{name:<11} {o0 * 1000:>9.0f}ms {o1 * 1000:>7.0f}ms {o1 / o0:>5.1f}x {r0 * 1000:>12.1f}ms"
              f" {r1 * 1000:>10.1f}ms {r1 / r0:>5.1f}x")


if __name__ == "__main__":
    main()
