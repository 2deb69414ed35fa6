"""Proxy overhead: latency added and throughput kept, against calling the engine directly, same run.

Starts the CPU engine on a tiny random model and the proxy (as `appliance serve` does), then drives
both with the same streaming and non-streaming chat requests at 1 and 16 concurrent calls, alternating
direct and proxied rounds so drift in machine load hits both alike. The load generator runs in its own
process so it does not compete with the proxy for the GIL.

    scripts/bench proxy [--rounds 3] [--requests 24] [--max-tokens 16]

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
                        async for chunk in r.aiter_bytes():
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


def main() -> None:
    parser = argparse.ArgumentParser(description="proxy overhead vs the engine directly")
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/proxy rounds per case")
    parser.add_argument("--requests", type=int, default=24, help="requests per round and concurrency level")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()

    from appliance.config import load_settings
    from appliance.proxy import ProxyServer, create_app
    from appliance.proxy.debug import open_debug_route
    from appliance.serving import Engine
    from appliance.store import Store
    from appliance.testing import make_tiny_model

    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    bundled = load_settings().model_path
    model = make_tiny_model(tmp / "tiny", bundled)
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp / "home"), "APPLIANCE_ENGINE__MODEL": str(model),
                                      "APPLIANCE_ENGINE__PORT": str(_free_port()),
                                      "APPLIANCE_ENGINE__MAX_MODEL_LEN": "2048",
                                      "APPLIANCE_PROXY__MAX_CONCURRENCY_PER_ROLLOUT": "64"})
    store = Store(settings.db_path)
    engine = Engine(settings, store)
    print("starting the engine (tiny model, CPU) ...", flush=True)
    engine.start()
    server = ProxyServer(create_app(store, engine, settings), settings, port=0).start()
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        route = open_debug_route(store, server.url, engine.policy_version, harness="bench")
        direct_url = f"{engine.base_url}/v1/chat/completions"
        proxy_url = f"{route.openai_base_url}/chat/completions"
        print(f"{'case':<22}{'path':<8}{'p50 ms':>9}{'p99 ms':>9}{'ttfb p50':>10}{'tok/s':>9}")
        for stream in (False, True):
            body = {"model": "policy", "messages": MESSAGES, "max_tokens": args.max_tokens, "ignore_eos": True,
                    "temperature": 0.0, "stream": stream}
            for conc in (1, 16):
                n = args.requests if conc == 1 else max(args.requests, 4 * conc)
                pool.submit(run_load, direct_url, body, conc, conc).result()  # warm-up
                pool.submit(run_load, proxy_url, body, conc, conc).result()
                results = {"direct": ([], [], 0, 0.0), "proxy": ([], [], 0, 0.0)}
                for _ in range(args.rounds):
                    for path, url in (("direct", direct_url), ("proxy", proxy_url)):
                        lat, ttft, tok, wall = pool.submit(run_load, url, body, conc, n).result()
                        a = results[path]
                        results[path] = (a[0] + lat, a[1] + ttft, a[2] + tok, a[3] + wall)
                case = f"{'stream' if stream else 'json'} x{conc}"
                for path in ("direct", "proxy"):
                    lat, ttft, tok, wall = results[path]
                    print(f"{case:<22}{path:<8}{pct(lat, .5) * 1e3:>9.1f}{pct(lat, .99) * 1e3:>9.1f}"
                          f"{statistics.median(ttft) * 1e3:>10.1f}{tok / wall:>9.0f}")
                d, p = results["direct"], results["proxy"]
                print(f"{case:<22}{'added':<8}{(pct(p[0], .5) - pct(d[0], .5)) * 1e3:>9.2f}"
                      f"{(pct(p[0], .99) - pct(d[0], .99)) * 1e3:>9.2f}"
                      f"{(statistics.median(p[1]) - statistics.median(d[1])) * 1e3:>10.2f}"
                      f"{(p[2] / p[3]) / (d[2] / d[3]):>8.3f}x", flush=True)
        recorded = store.model_calls(route.rollout_id)
        print(f"recorded calls: {len(recorded)}, all ok: {all(c.status == 'ok' for c in recorded)}")
    finally:
        pool.shutdown()
        server.stop()
        engine.stop()


if __name__ == "__main__":
    main()
