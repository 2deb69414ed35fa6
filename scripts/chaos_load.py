"""The load run (`scripts/chaos load`): a real `appliance run --headless` on the tiny random model (the CPU
vLLM, the cpu profile) with 16 rollouts in flight through the proxy and the sandboxes, for 10 minutes.

Every minute it prints the rollouts finished and in flight, the RSS, open files and threads of the
appliance process and of the engine's process group, and the store's size; at the end (SIGTERM, as an
operator stops it) rollouts/min, the p50/p99 model-call latency through the proxy, every error that is not
the agent's, the store's bytes per row written, and a verdict line. The run lives in its own home (a tmp
folder) and its own Podman storage root, with the sandbox image shared read-only from the main store.

    scripts/chaos load [--minutes 10] [--concurrency 16] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tests/tiny_model.py: the same tiny model the slow tests serve

from appliance.config import load_settings  # noqa: E402
from appliance.sandbox import podman_env  # noqa: E402
from appliance.schemas import Outcome, RolloutStatus  # noqa: E402
from appliance.store import Store  # noqa: E402
from tiny_model import make_tiny_model  # noqa: E402


def _group(pgid: int) -> list[int]:
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.getpgid(int(p)) == pgid:
                    pids.append(int(p))
            except ProcessLookupError:
                pass
    return pids


def _proc_figures(pids: list[int]) -> tuple[float, int, int]:
    """(RSS in MB, open files, threads) summed over `pids`."""
    rss, files, threads = 0.0, 0, 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            files += len(os.listdir(f"/proc/{pid}/fd"))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads += int(line.split()[1])
    return rss, files, threads


def _store_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the load lasts once rollouts run")
    parser.add_argument("--concurrency", type=int, default=16, help="rollouts in flight (sandbox.max_concurrent)")
    parser.add_argument("--home", type=Path, default=None, help="the run's home (default: a new tmp folder)")
    args = parser.parse_args()

    base = args.home or Path(tempfile.mkdtemp(prefix="chaos-load-"))
    main_settings = load_settings()
    bundled = main_settings.model_path
    if not (bundled / "tokenizer.json").exists():
        print(f"the bundled model is not converted at {bundled}: run scripts/setup", file=sys.stderr)
        return 2
    model = base / "tiny"
    if not (model / "config.json").exists():
        make_tiny_model(model, bundled)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")} | {
        "APPLIANCE_HOME": str(base / "home"),
        "APPLIANCE_PODMAN__GRAPHROOT": str(base / "storage"),
        "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps([str(main_settings.podman_graphroot)]),
        "APPLIANCE_ENGINE__MODEL": str(model),
        "APPLIANCE_ENGINE__MAX_MODEL_LEN": "2048",
        "APPLIANCE_PROXY__PORT": "0",
        "APPLIANCE_SANDBOX__MEMORY": "256m",
        "APPLIANCE_SANDBOX__MAX_CONCURRENT": str(args.concurrency),
        # enough practice per iteration to keep `concurrency` rollouts in flight between training steps
        "APPLIANCE_LOOP__TASKS_PER_ITERATION": str(max(4, args.concurrency // 2)),
        "APPLIANCE_LOOP__GROUP_SIZE": "4",
        "APPLIANCE_LOOP__HELDOUT_LEVELS": "[1]",
        "APPLIANCE_LOOP__HELDOUT_PER_CELL": "1",
        "APPLIANCE_EVALUATION__SAMPLES_PER_TASK": "1",
        "APPLIANCE_EVALUATION__DEVSET": "false",
        "APPLIANCE_LOOP__WARMSTART_FIRST": "false",
        "APPLIANCE_LOOP__PROPOSE": "0",
        "APPLIANCE_LOOP__ANALYSIS": "false",
        "APPLIANCE_LOOP__EXTRA_DRAWS": "0",
        "APPLIANCE_HARNESS__MAX_TURNS": "6",
        "APPLIANCE_HARNESS__MAX_TOKENS_PER_CALL": "48",
        "APPLIANCE_TRAINING__MIN_VALID_ROLLOUTS": "2",
        "APPLIANCE_TRAINING__DEMO_WARMSTART_TASKS": "1",
        "APPLIANCE_TRAINING__DEMO_WARMSTART_LEVELS": "[2]",
    }
    settings = load_settings(environ=env)
    log = base / "run.log"
    print(f"load run in {base} (log {log}); {args.concurrency} rollouts in flight for {args.minutes:g} minutes")
    proc = subprocess.Popen([str(REPO / ".venv/bin/appliance"), "run", "--iterations", "50", "--headless"],
                            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    started = time.time()
    samples: list[dict] = []
    load_from = None
    try:
        while proc.poll() is None:
            time.sleep(2.0)
            if not settings.db_path.exists():
                continue
            store = Store(settings.db_path)
            try:
                running = len(store.rollouts(status=RolloutStatus.RUNNING))
                if load_from is None and running:
                    load_from = time.time()
                    print(f"rollouts running {load_from - started:.0f} s after the start (engine up); the clock starts")
                if load_from is None:
                    continue
                elapsed = time.time() - load_from
                if elapsed >= 60 * (len(samples) + 1) or elapsed >= 60 * args.minutes:
                    done = len(store.rollouts(status=RolloutStatus.FINISHED))
                    pgid = int((settings.home / "engine.pid").read_text().strip())
                    app, engine = _proc_figures([proc.pid]), _proc_figures(_group(pgid))
                    sample = {"minute": round(elapsed / 60, 1), "finished": done, "running": running,
                              "appliance_rss_mb": round(app[0]), "appliance_files": app[1],
                              "appliance_threads": app[2], "engine_rss_mb": round(engine[0]),
                              "engine_files": engine[1], "engine_threads": engine[2],
                              "store_mb": round(_store_bytes(settings.db_path) / 1e6, 2)}
                    samples.append(sample)
                    print(json.dumps(sample), flush=True)
                if elapsed >= 60 * args.minutes:
                    break
            finally:
                store.close()
        else:
            print(f"`appliance run` exited {proc.returncode} before the load ended:\n"
                  + log.read_text(errors="replace")[-3000:])
            return 1
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    store = Store(settings.db_path)
    try:
        rollouts = [r for r in store.rollouts() if r.started_at and r.started_at >= (load_from or 0)]
        finished = [r for r in rollouts if r.status == RolloutStatus.FINISHED]
        infra = [r for r in finished if r.outcome == Outcome.INFRA_ERROR]
        calls = [c for r in rollouts for c in store.model_calls(r.id)]
        failed_calls = [c for c in calls if c.status != "ok"]
        left_running = store.rollouts(status=RolloutStatus.RUNNING)
        outcomes: dict[str, int] = {}
        for r in finished:
            outcomes[str(r.outcome)] = outcomes.get(str(r.outcome), 0) + 1
    finally:
        store.close()
    latencies = sorted(c.latency_s for c in calls if c.status == "ok")
    p = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]) if latencies else (lambda q: 0.0)
    sandboxes = subprocess.run(["podman", "ps", "-aq", "--filter", "label=appliance.sandbox"], capture_output=True,
                               text=True, env=podman_env(settings)).stdout.split()
    engines = subprocess.run(["pgrep", "-f", f"--model {settings.engine.model}"], capture_output=True,
                             text=True).stdout.split()
    rss = [s["appliance_rss_mb"] for s in samples]
    summary = {
        "minutes": args.minutes, "concurrency": args.concurrency, "exit_code": code,
        "rollouts_finished": len(finished), "rollouts_per_min": round(len(finished) / args.minutes, 1),
        "mean_in_flight": round(statistics.mean(s["running"] for s in samples), 1) if samples else 0,
        "outcomes": outcomes, "infra_errors": [r.error for r in infra],
        "model_calls": len(calls), "failed_calls": [c.error for c in failed_calls][:10],
        "call_latency_p50_s": round(p(0.50), 3), "call_latency_p99_s": round(p(0.99), 3),
        "appliance_rss_mb_first_last": [rss[0], rss[-1]] if rss else [],
        "engine_rss_mb_first_last": [samples[0]["engine_rss_mb"], samples[-1]["engine_rss_mb"]] if samples else [],
        "store_bytes_per_call": round(_store_bytes(settings.db_path) / max(1, len(calls))),
        "left_running": len(left_running), "sandboxes_left": len(sandboxes), "engine_processes_left": len(engines),
    }
    print(json.dumps(summary, indent=1))
    ok = code == 0 and not infra and not failed_calls and not left_running and not sandboxes and not engines
    print(f"load: {'PASS' if ok else 'FAIL'}: {len(finished)} rollouts in {args.minutes:g} min, "
          f"{len(infra)} infra errors, {len(failed_calls)} failed calls, p50/p99 {p(0.5):.2f}/{p(0.99):.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
