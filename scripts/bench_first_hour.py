"""The first-hour benchmark (issue 49): from a fresh data directory, how long until the TUI shows a held-out
point of a trained policy, and where the minutes go.

Usage: scripts/bench first-hour [--minutes 45] [--iterations 1] [--arms today,new] [--base DIR]
                                [--set KEY=VALUE ...]
       scripts/bench first-hour --report-only --home DIR [--home DIR ...]

Each arm is one `appliance run --headless --iterations N` of this checkout on the cpu profile in a fresh data
directory under --base (the bundled model and the sandbox image of the default data directory are shared
read-only, as `scripts/bench learning` does), stopped at --minutes. The arms run one after the other, never
at once: they share the cores, so the table compares arms measured in the same session, and `uptime`'s load
is printed beside each (other people's work on a shared machine moves every figure; read the ratios).

- today: the settings before issue 49 (the baseline evaluates every held-out task and the whole dev set)
- new:   the defaults

Per arm: minutes from the start of `appliance run` to the first held-out point of a trained policy (with its
interval), minutes per iteration and per phase, and for each phase that called the model the engine's busy
share (the union of its calls' spans over the phase's wall time), the calls in flight on average, the
completion tokens per second it served, and the share of its rollouts cut at the turn limit (cut) or ended
for repeating a turn (repeat). Everything is read
from the store, so `--report-only` prints the same table for any run, finished or not.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.config import load_settings  # noqa: E402
from appliance.evaluate import rollout_cost_s  # noqa: E402
from appliance.schemas import Outcome  # noqa: E402
from appliance.store import Store  # noqa: E402

ARMS = {
    "today": {"evaluation.baseline_tasks": "0", "evaluation.baseline_devset_tasks": "0"},
    "new": {},
}


@dataclass
class Span:
    iteration: int
    phase: str
    start: float
    end: float | None  # None: still running (or cut by the stop)
    failed: bool = False  # ended without its `done` (a failed attempt, an interruption)


def phase_spans(store: Store, run_id: str) -> list[Span]:
    """Each phase run of the run, from its `phase` event to the `info` event that says it was done; an attempt
    that failed (or was cut) ends where the next phase run starts, not done."""
    spans: list[Span] = []
    open_: dict[tuple[int, str], Span] = {}
    for e in store.events(run_id, limit=1_000_000):
        if e.kind == "phase" and "iteration" in e.data:
            for cut in open_.values():  # one phase at a time: a run still open failed or was interrupted
                cut.end, cut.failed = e.created_at, True
            open_.clear()
            span = Span(int(e.data["iteration"]), e.message, e.created_at, None)
            open_[(span.iteration, span.phase)] = span
            spans.append(span)
        elif e.kind in ("info", "error") and "phase" in e.data:  # "...: PHASE done", "... interrupted", "... failed"
            found = open_.pop((int(e.data["iteration"]), str(e.data["phase"])), None)
            if found is not None:
                found.end, found.failed = e.created_at, not e.message.endswith(" done")
    return spans


def started_at(store: Store, run_id: str) -> float:
    """The run's first event (the engine starting, before the run row): when `appliance run` began its work."""
    first = store.events(run_id, limit=1)
    return first[0].created_at if first else store.get_run(run_id).created_at


def first_trained_point(store: Store, run_id: str) -> tuple[float, str] | None:
    """(when, what) of the first held-out pass@1 of a policy trained in this run (iteration >= 1)."""
    for e in store.events(run_id, kind="evaluate", limit=100_000):
        if "held-out pass@1" in e.message and not e.message.startswith("iteration 0:"):
            return e.created_at, e.message
    return None


def engine_use(calls: list[tuple[float, float, int]], start: float, end: float) -> dict[str, float]:
    """Busy share, calls in flight and completion tokens/s over [start, end] of model calls (begin, end, tokens)."""
    wall = max(end - start, 1e-9)
    inside = sorted((max(b, start), min(f, end), n) for b, f, n in calls if f > start and b < end)
    busy, reach, flight = 0.0, start, 0.0
    for b, f, _ in inside:
        flight += f - b
        if f > reach:
            busy += f - max(b, reach)
            reach = f
    tokens = sum(n for b, f, n in calls if start <= f <= end)
    return {"busy": busy / wall, "in_flight": flight / wall, "tok_s": tokens / wall, "calls": len(inside)}


def report(home: Path, label: str = "") -> dict[str, object]:
    store = Store(home / "appliance.db", migrate=False)
    try:
        run = store.latest_run()
        if run is None:
            print(f"{label or home}: no run")
            return {}
        t0 = started_at(store, run.id)
        rollouts = store.rollouts(run.id)
        calls = [(c.created_at - c.latency_s, c.created_at, len(c.completion_ids))
                 for r in rollouts for c in store.model_calls(r.id)]
        point = first_trained_point(store, run.id)
        now = time.time()
        print(f"\n== {label or home.name}: run {run.id} ({run.status}) in {home}")
        print("first held-out point of a trained policy: " + (
            f"{(point[0] - t0) / 60:.1f} min after the start: {point[1]}" if point else "not reached"))
        print(f"{'it':>3} {'phase':<10} {'min':>6} {'rollouts':>8} {'cut':>5} {'repeat':>6} {'s/rollout':>9} "
              f"{'busy':>5} {'in flight':>9} {'tok/s':>6}")
        per_iteration: dict[int, float] = {}
        rows = []
        for s in phase_spans(store, run.id):
            end = s.end or now
            per_iteration[s.iteration] = per_iteration.get(s.iteration, 0.0) + end - s.start
            mine = [r for r in rollouts if r.iteration == s.iteration and r.started_at and r.finished_at
                    and s.start <= r.started_at <= end and r.outcome != Outcome.INFRA_ERROR]
            cut = sum((r.error or "").startswith("turn_limit") for r in mine)
            rep = sum((r.error or "").startswith("repeating") for r in mine)
            use = engine_use(calls, s.start, end)
            cost = rollout_cost_s(mine)
            rows.append({"iteration": s.iteration, "phase": s.phase, "minutes": (end - s.start) / 60,
                         "done": s.end is not None and not s.failed, "rollouts": len(mine), "cut": cut,
                         "repeating": rep, **use})
            mark = "!" if s.failed else "" if s.end else "*"
            print(f"{s.iteration:>3} {s.phase + mark:<10} {(end - s.start) / 60:6.1f} "
                  f"{len(mine):>8} {cut / len(mine) if mine else 0:5.0%} {rep / len(mine) if mine else 0:6.0%} "
                  f"{cost if cost else 0:9.1f} {use['busy']:5.0%} {use['in_flight']:9.1f} {use['tok_s']:6.1f}")
        print("minutes per iteration: " + ", ".join(f"{i}: {m / 60:.1f}" for i, m in sorted(per_iteration.items()))
              + "   (* = still running or stopped there, ! = a failed or interrupted attempt)")
        return {"label": label, "home": str(home), "run": run.id, "first_trained_point_min":
                (point[0] - t0) / 60 if point else None, "iterations_min": {i: m / 60 for i, m in
                                                                            per_iteration.items()}, "phases": rows}
    finally:
        store.close()


def arm_env(home: Path, sets: dict[str, str]) -> dict[str, str]:
    """`appliance run` of this checkout in `home` on the cpu profile, the shared model and image, then `sets`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update({"PYTHONPATH": str(REPO), "APPLIANCE_HOME": str(home), "APPLIANCE_PROFILE": "cpu",
                "APPLIANCE_ENGINE__MODEL": str(load_settings().model_path),
                # free ports: another appliance on this machine (a run of someone else's) may hold the defaults
                "APPLIANCE_ENGINE__PORT": str(free_port()), "APPLIANCE_PROXY__PORT": "0",
                "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps([str(load_settings().podman_graphroot)])})
    for key, value in sets.items():
        env["APPLIANCE_" + key.upper().replace(".", "__")] = value
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_arm(home: Path, sets: dict[str, str], minutes: float, iterations: int) -> float:
    """One `appliance run` until it ends or `minutes` pass (then SIGTERM, its clean stop); its wall minutes."""
    home.mkdir(parents=True, exist_ok=False)  # fresh: a run in a used directory is not a first hour
    t0 = time.monotonic()
    with open(home / "bench.log", "w") as log:
        proc = subprocess.Popen([str(REPO / ".venv/bin/appliance"), "run", "--headless", "--iterations",
                                 str(iterations)], env=arm_env(home, sets), cwd=REPO, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=minutes * 60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return (time.monotonic() - t0) / 60


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=45.0, help="wall-clock budget of each arm")
    ap.add_argument("--iterations", type=int, default=1, help="training iterations of each arm's run")
    ap.add_argument("--arms", default="today,new", help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--base", type=Path, default=None, help="folder for the arms' data directories (default: tmp)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting for every arm")
    ap.add_argument("--report-only", action="store_true", help="only print the table of each --home")
    ap.add_argument("--home", type=Path, action="append", default=[], help="with --report-only: a data directory")
    ap.add_argument("--json", type=Path, default=None, help="also write the tables as JSON here")
    args = ap.parse_args()
    if args.report_only:
        if not args.home:
            ap.error("--report-only needs --home")
        results = [report(h) for h in args.home]
    else:
        import tempfile

        base = args.base or Path(tempfile.mkdtemp(prefix="appliance-bench-first-hour-"))
        extra = dict(kv.partition("=")[::2] for kv in args.set)
        results = []
        for name in args.arms.split(","):
            if name not in ARMS:
                ap.error(f"unknown arm {name!r}; the arms are {', '.join(ARMS)}")
            home = base / name
            before = load()
            took = run_arm(home, {**ARMS[name], **extra}, args.minutes, args.iterations)
            label = f"{name} ({took:.1f} min; load {before} at its start, {load()} at its end)"
            results.append(report(home, label))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
