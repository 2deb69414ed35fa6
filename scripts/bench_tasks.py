"""Agent-free task validation throughput: validations per minute with 4 parallel sandboxes (a fresh
sandbox per task, and `validate_many` with a new sandbox per task or, its default, a scrubbed sandbox for
25 tasks), against a baseline of one task at a time measured in the same run, over the same mix of families
and levels.

Usage: scripts/bench tasks [--tasks N] [--parallel P]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from appliance.config import load_settings
from appliance.sandbox import build_image, sweep
from appliance.tasks import validate_agent_free
from appliance.tasks.families import FAMILIES, LEVELS, generate
from appliance.tasks.validate import validate_many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=24, help="tasks validated in each configuration")
    ap.add_argument("--parallel", type=int, default=4, help="sandboxes alive at once in the measured run")
    args = ap.parse_args()
    settings = load_settings()
    build_image(settings)
    cells = [(f, lvl) for f in FAMILIES for lvl in LEVELS]
    specs = [generate(f, lvl, random.Random(f"bench:{i}")) for i, (f, lvl) in
             enumerate(cells[i % len(cells)] for i in range(args.tasks))]
    random.Random(0).shuffle(specs)

    def fresh_each(parallel: int) -> tuple[float, int]:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(parallel) as ex:
            ok = sum(ex.map(lambda s: validate_agent_free(settings, s).ok, specs))
        return time.perf_counter() - t0, ok

    def many(reuse: int) -> Callable[[int], tuple[float, int]]:
        def run(parallel: int) -> tuple[float, int]:
            t0 = time.perf_counter()
            ok = sum(r.ok for r in validate_many(settings, specs, parallel=parallel, reuse=reuse))
            return time.perf_counter() - t0, ok
        return run

    rows = []
    try:
        for name, fn, p in [("1 sandbox per task, 1 at a time (baseline)", fresh_each, 1),
                            (f"1 sandbox per task, {args.parallel} parallel", fresh_each, args.parallel),
                            (f"validate_many: {args.parallel} parallel, reuse=1", many(1), args.parallel),
                            (f"validate_many: {args.parallel} parallel, reuse=25 (default)", many(25), args.parallel)]:
            wall, ok = fn(p)
            rows.append((name, 60 * len(specs) / wall, ok))
    finally:
        sweep(settings)
    print(f"tasks per configuration: {len(specs)} (all {len(FAMILIES)} families x levels 1..5, mixed)")
    base = rows[0][1]
    for name, rate, ok in rows:
        print(f"{name:<50} {rate:7.1f} validations/min   valid {ok}/{len(specs)}   {rate / base:5.2f}x baseline")


if __name__ == "__main__":
    main()
