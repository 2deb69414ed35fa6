"""Proxy overhead: latency added and throughput kept, against calling the engine directly, same run.

Two measurements, each direct vs through the proxy, at 1 and 16 concurrent calls, streaming and not,
alternating direct and proxied rounds so drift in machine load hits both alike:
1. the proxy alone, in front of an engine stand-in that answers instantly
   (appliance/testing/instant_engine.py), so the proxy's own cost is not drowned by inference time;
2. end to end, in front of the CPU vLLM engine serving a tiny random model.
Direct calls ask for token ids and logprobs as the proxy does, so the difference is the proxy's cost.
The load generator and the instant engine run in their own processes (no GIL sharing with the proxy).

    scripts/bench proxy [--rounds 3] [--requests 24] [--max-tokens 16] [--skip-engine]

Targets (issue 4): added p50 latency <= 2 ms, throughput >= 0.95x direct.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tiny_model.py

MESSAGES = [{"role": "user", "content": "Write one short sentence about the sea."}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_load(url: str, body: dict, concurrency: int, n: int) -> tuple[list[float], list[float], int, float]:
    """n requests with `concurrency` in flight: (latencies, times to first byte, tokens, wall seconds)."""
    import httpx

    async def main() -> tuple[list[float], list[float], int, float]:
        lat, ttft, tokens = [], [], 0
        queue = list(range(n))
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            async def worker() -> None:
                nonlocal tokens
                while queue:
                    queue.pop()
                    t0 = time.perf_counter()
                    first = None
                    async with client.stream("POST", url, json=body) as r:
                        r.raise_for_status()
                        async for _ in r.aiter_bytes():
                            if first is None:
                                first = time.perf_counter() - t0
                    lat.append(time.perf_counter() - t0)
                    ttft.append(first or 0.0)
                    tokens += body["max_tokens"]  # ignore_eos: every call generates exactly max_tokens

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return lat, ttft, tokens, time.perf_counter() - start

    return asyncio.run(main())


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def compare(pool, label: str, direct_url: str, proxy_url: str, body: dict, rounds: int, requests: int,
            direct_body: dict | None = None) -> None:
    """Alternating direct and proxied rounds at 1 and 16 concurrent calls; one table row each, then deltas."""
    for conc in (1, 16):
        n = requests if conc == 1 else max(requests, 4 * conc)
        runs = {"direct": (direct_url, direct_body or body), "proxy": (proxy_url, body)}
        for url, b in runs.values():  # warm-up: connections, caches
            pool.submit(run_load, url, b, conc, conc).result()
        results = {path: ([], [], 0, 0.0) for path in runs}
        for _ in range(rounds):
            for path, (url, b) in runs.items():
                lat, ttft, tok, wall = pool.submit(run_load, url, b, conc, n).result()
                a = results[path]
                results[path] = (a[0] + lat, a[1] + ttft, a[2] + tok, a[3] + wall)
        case = f"{label} {'stream' if body.get('stream') else 'json'} x{conc}"
        for path in runs:
            lat, ttft, tok, wall = results[path]
            print(f"{case:<28}{path:<8}{pct(lat, .5) * 1e3:>9.2f}{pct(lat, .99) * 1e3:>9.2f}"
                  f"{statistics.median(ttft) * 1e3:>10.2f}{tok / wall:>9.0f}")
        d, p = results["direct"], results["proxy"]
        print(f"{case:<28}{'added':<8}{(pct(p[0], .5) - pct(d[0], .5)) * 1e3:>9.2f}"
              f"{(pct(p[0], .99) - pct(d[0], .99)) * 1e3:>9.2f}"
              f"{(statistics.median(p[1]) - statistics.median(d[1])) * 1e3:>10.2f}"
              f"{(p[2] / p[3]) / (d[2] / d[3]):>8.3f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="proxy overhead vs the engine directly")
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/proxy rounds per case")
    parser.add_argument("--requests", type=int, default=24, help="requests per round and concurrency level")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--skip-engine", action="store_true", help="measure against the instant engine only")
    args = parser.parse_args()

    from appliance.config import load_settings
    from appliance.proxy import ProxyServer, create_app
    from appliance.proxy.debug import open_debug_route
    from appliance.serving import Engine
    from appliance.store import Store
    from appliance.testing.instant_engine import InstantEngine, serve_instant_engine
    from tiny_model import make_tiny_model  # tests/tiny_model.py

    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp / "home"), "APPLIANCE_ENGINE__PORT": str(_free_port()),
                                      "APPLIANCE_ENGINE__MAX_MODEL_LEN": "2048",
                                      "APPLIANCE_PROXY__MAX_CONCURRENCY_PER_ROLLOUT": "64"})
    store = Store(settings.db_path)
    spawn = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn)
    header = f"{'case':<28}{'path':<8}{'p50 ms':>9}{'p99 ms':>9}{'ttfb p50':>10}{'tok/s':>9}"
    body = {"model": "policy", "messages": MESSAGES, "max_tokens": args.max_tokens, "ignore_eos": True,
            "temperature": 0.0}
    # what the proxy sends the engine anyway: the fair direct baseline for the proxy's own cost
    forced = {"return_token_ids": True, "logprobs": True}

    # 1. the proxy alone: an engine (own process) that answers instantly, so engine time does not drown it
    port = _free_port()
    instant = spawn.Process(target=serve_instant_engine, args=(port, args.max_tokens), daemon=True)
    instant.start()
    engine = None
    try:
        _wait_port(port)
        fake = InstantEngine(f"http://127.0.0.1:{port}")
        with ProxyServer(create_app(store, fake, settings), settings, port=0) as server:
            route = open_debug_route(store, server.url, 0, harness="bench")
            print("proxy alone (instant engine in its own process):")
            print(header)
            for stream in (False, True):
                compare(pool, "instant", f"{fake.base_url}/v1/chat/completions",
                        f"{route.openai_base_url}/chat/completions", {**body, "stream": stream},
                        args.rounds, args.requests * 4, direct_body={**body, **forced, "stream": stream})
        instant.terminate()
        if args.skip_engine:
            return

        # 2. end to end: the CPU vLLM engine on a tiny random model
        model = make_tiny_model(tmp / "tiny", load_settings().model_path)
        settings.engine.model = model
        engine = Engine(settings, store)
        print("starting the engine (tiny model, CPU) ...", flush=True)
        engine.start()
        with ProxyServer(create_app(store, engine, settings), settings, port=0) as server:
            route = open_debug_route(store, server.url, engine.policy_version, harness="bench")
            print("end to end (vLLM CPU, tiny model; direct calls ask for ids + logprobs like the proxy does):")
            print(header)
            for stream in (False, True):
                compare(pool, "vllm", f"{engine.base_url}/v1/chat/completions",
                        f"{route.openai_base_url}/chat/completions", {**body, "stream": stream},
                        args.rounds, args.requests, direct_body={**body, **forced, "stream": stream})
            recorded = store.model_calls(route.rollout_id)
            print(f"recorded calls: {len(recorded)}, all ok: {all(c.status == 'ok' for c in recorded)}")
    finally:
        pool.shutdown()
        if instant.is_alive():
            instant.terminate()
        if engine is not None:
            engine.stop()


def _wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s} s")


if __name__ == "__main__":
    main()
