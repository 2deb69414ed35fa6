"""Sandbox speed: cold start, exec via the CLI, exec via the persistent shell, put/get of 5 MB, and 8
sandboxes in parallel. Each figure is a median over repeats, printed beside a baseline measured in the
same run (raw `podman run`/`podman exec` without the appliance's hardening and bookkeeping).

Targets (issue 3): persistent shell <= 5 ms per command, cold start <= 0.4 s.
Usage: scripts/bench sandbox [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from appliance.config import Settings, load_settings
from appliance.sandbox import Sandbox, build_image, podman_env, sweep
from appliance.sandbox.podman import podman_bin


def median_s(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(name: str, value: float, baseline: float | None = None, base_name: str = "") -> None:
    ratio = f"   {value / baseline:5.2f}x {base_name} ({baseline * 1000:.1f} ms)" if baseline else ""
    print(f"{name:<38} {value * 1000:9.1f} ms{ratio}")


def api_exec_median(settings: Settings, name: str, n: int) -> float | None:
    """The alternative to the CLI: podman-py against `podman system service` (a process to babysit)."""
    try:
        import podman as podman_py
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "api.sock"
        svc = subprocess.Popen([podman_bin(), "system", "service", "--time=0", f"unix://{sock}"],
                               env=podman_env(settings))
        try:
            deadline = time.monotonic() + 20
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            container = podman_py.PodmanClient(base_url=f"unix://{sock}").containers.get(name)
            return median_s(lambda: container.exec_run(["true"], demux=True), n)
        finally:
            svc.terminate()
            svc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    n = ap.parse_args().repeats
    settings = load_settings()
    ref = build_image(settings)
    env = podman_env(settings)
    pod = podman_bin()
    print(f"image {ref}; {n} repeats; medians")

    raw_run = median_s(lambda: subprocess.run([pod, "run", "--rm", "--pull=never", "--network=none", ref, "true"],
                                              env=env, check=True, capture_output=True), n)
    starts: list[float] = []
    stops: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = Sandbox.start(settings)
        t1 = time.perf_counter()
        sb.stop()
        starts.append(t1 - t0)
        stops.append(time.perf_counter() - t1)
    row("cold start (Sandbox.start)", statistics.median(starts), raw_run, "raw `podman run --rm true`")
    row("stop (podman rm -f -t 0)", statistics.median(stops))

    with Sandbox.start(settings) as sb:
        raw_exec = median_s(lambda: subprocess.run([pod, "exec", sb.name, "true"], env=env, check=True), n * 2)
        row("exec via CLI (sb.exec)", median_s(lambda: sb.exec("true"), n * 2), raw_exec, "raw `podman exec true`")
        sh = sb.shell()
        sh.run("true")
        api = api_exec_median(settings, sb.name, n * 2)
        if api is not None:
            row("  (podman-py exec over the API socket)", api, raw_exec, "raw `podman exec true`")
        row("exec via persistent shell (sh.run)", median_s(lambda: sh.run("true"), n * 20), raw_exec,
            "raw `podman exec true`")
        payload = bytes(range(256)) * (5 * 1024 * 1024 // 256)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "five.bin"
            src.write_bytes(payload)
            row("put 5 MB", median_s(lambda: sb.put(src, "/workspace/five.bin"), n))
            row("get 5 MB", median_s(lambda: sb.get("/workspace/five.bin", Path(tmp) / "back.bin"), n))
            assert (Path(tmp) / "back.bin").read_bytes() == payload

    work = "python3 -c 'sum(range(3_000_000))'"

    def one() -> None:
        with Sandbox.start(settings) as box:
            box.exec(work)

    single = median_s(one, max(3, n // 3))

    def parallel() -> None:
        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    par = median_s(parallel, max(3, n // 3))
    row("1 sandbox: start + python + stop", single)
    row("8 in parallel (wall)", par, single, "one sandbox")
    print(f"{'8 in parallel, per sandbox':<38} {par / 8 * 1000:9.1f} ms")
    leftovers = sweep(settings, orphans_only=False)
    print(f"leftover containers swept: {leftovers}")


if __name__ == "__main__":
    main()
