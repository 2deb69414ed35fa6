"""Evaluate one saved policy, as `appliance run` measures it, under settings of your choice: the held-out
set and the transfer dev set (appliance/tasks/devset, never trained on), pass@1 with 95 % Wilson intervals.

Usage: scripts/bench checkpoint [--model DIR] [--seed 0] [--heldout-per-cell 1] [--home DIR] [--set KEY=VALUE ...]

A recipe's inference side (the harness's temperature, turn cap, repeat limit) can be compared on a policy
a 2-hour `scripts/bench learning` run already trained (its `checkpoints/vN` folder), without training
again: this is the baseline evaluation of a fresh run whose base model is that folder (the run is
stopped when its baseline iteration is done), with the whole dev set (evaluation.devset_min_tasks
raised). Every call evaluates the same dev tasks; the held-out tasks are drawn per run, so two calls'
held-out numbers are over different draws. `--set evaluation.devset_batch=second` measures the dev set's
second batch (written later, from pages the families were never chosen by) instead of the first.
Run it under `flock /tmp/appliance-heavy.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from appliance.config import load_settings  # noqa: E402
from bench_learning import iterations_of, report, run_env  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="the policy's folder (default: the bundled model)")
    ap.add_argument("--seed", type=int, default=0, help="training.seed (the engine's sampling seed)")
    ap.add_argument("--heldout-per-cell", type=int, default=1, help="held-out tasks per family and level")
    ap.add_argument("--home", type=Path, default=None, help="APPLIANCE_HOME of the evaluation (default: a new tmp dir)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="APPLIANCE_* setting, e.g. harness.temperature=0.2")
    args = ap.parse_args()
    settings = load_settings()
    model = (args.model or settings.model_path).resolve()
    if not (model / "config.json").is_file():
        ap.error(f"{model} is not a model folder (no config.json): pass a checkpoints/vN folder or leave --model out")
    home = args.home or Path(tempfile.mkdtemp(prefix="appliance-bench-checkpoint-"))
    home.mkdir(parents=True, exist_ok=True)
    env = run_env(home, model, args.seed, args.set, APPLIANCE_LOOP__ITERATIONS="1",
                  APPLIANCE_LOOP__HELDOUT_PER_CELL=str(args.heldout_per_cell),
                  APPLIANCE_EVALUATION__BASELINE_TASKS="0")  # every held-out task: this baseline is the measure
    print(f"evaluating {model} in {home} ({' '.join(args.set) or 'default settings'})", flush=True)
    with open(home / "bench.log", "a") as log:
        proc = subprocess.Popen([str(REPO / ".venv/bin/appliance"), "run", "--headless"], env=env, cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None and not baseline_done(home):
            time.sleep(5)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # `appliance run` stops cleanly on SIGTERM
            proc.wait()
        elif proc.returncode != 0:
            print(f"appliance run exited {proc.returncode}: see {home / 'bench.log'}")
            return proc.returncode
    return report(home)


def baseline_done(home: Path) -> bool:
    """Whether the run's baseline iteration (evaluate, diagnose) is over."""
    from appliance.schemas import Phase

    its = iterations_of(home)
    return len(its) > 1 or (bool(its) and its[0].phase == Phase.DONE)


if __name__ == "__main__":
    sys.exit(main())
