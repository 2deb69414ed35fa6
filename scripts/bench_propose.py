"""Benchmark self-proposal's yield: how many of the policy's own task proposals parse and validate, for a few
(max_tokens, temperature) settings of the request, on the served model (the bundled one by default).

    scripts/bench propose [--per 2] [--configs 96:0.0 512:0.7 768:1.0] [--model DIR]

For each config, `--per` proposals per family at level 2 go to the real CPU engine at once (it batches them),
through `appliance.tasks.propose`'s prompt and forgiving parser; the parsed ones are validated in real
sandboxes exactly as VALIDATE admits a proposal (`validate_many`: untouched workspace fails, reference
passes, and the rest). What is printed (JSON): per config, proposals asked, parsed, valid, the reasons the
others were refused, seconds, and one parsed proposal's text. Nothing is stored in the appliance's data
directory: the engine and store live in a temporary home.

Run it under `flock /tmp/appliance-heavy.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.config import load_settings  # noqa: E402
from appliance.tasks.families import FAMILIES  # noqa: E402
from appliance.tasks.propose import PROMPT, parse_proposal  # noqa: E402
from appliance.tasks.validate import validate_many  # noqa: E402

LEVEL = 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per", type=int, default=2, help="proposals per family and config")
    ap.add_argument("--configs", nargs="+", default=["96:0.0", "512:0.7", "768:1.0"],
                    help="MAX_TOKENS:TEMPERATURE of the proposal request (the loop's is 96:0.0)")
    ap.add_argument("--model", type=Path, default=None, help="model folder to serve (default: the bundled model)")
    args = ap.parse_args()

    import httpx

    from appliance.serving import Engine
    from appliance.store import Store

    settings = load_settings()
    if args.model:
        settings.engine.model = args.model
    model = settings.model_path
    with tempfile.TemporaryDirectory(prefix="bench-propose-") as home:
        settings.home = Path(home)
        settings.engine.model = model
        settings.engine.startup_timeout_s = max(settings.engine.startup_timeout_s, 900)
        store = Store(settings.db_path)
        engine = Engine(settings, store)
        engine.start()
        out: dict[str, object] = {"model": str(model), "level": LEVEL, "per_family": args.per, "configs": {}}
        try:
            asks = [f for f in FAMILIES for _ in range(args.per)]
            for config in args.configs:
                max_tokens, temperature = int(config.split(":")[0]), float(config.split(":")[1])

                def ask(family: str, seed: int, max_tokens: int = max_tokens, temperature: float = temperature) -> str:
                    prompt = PROMPT.format(family=family, description=FAMILIES[family].DESCRIPTION, level=LEVEL)
                    r = httpx.post(f"{engine.base_url}/v1/chat/completions", timeout=1800, json={
                        "model": engine.model_name(), "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": max_tokens, "temperature": temperature, "seed": seed})
                    r.raise_for_status()
                    return r.json()["choices"][0]["message"]["content"] or ""

                t0 = time.monotonic()
                with ThreadPoolExecutor(max_workers=len(asks)) as ex:
                    texts = list(ex.map(ask, asks, range(len(asks))))
                generated_s = time.monotonic() - t0
                parsed = [(t, s) for t, s in ((t, parse_proposal(t, f, LEVEL)) for t, f in zip(texts, asks)) if s]
                results = validate_many(settings, [s for _, s in parsed]) if parsed else []
                refused = Counter((v.reason or "").split(":")[0] for v in results if not v.ok)
                out["configs"][config] = {  # type: ignore[index]
                    "asked": len(asks), "parsed": len(parsed), "valid": sum(v.ok for v in results),
                    "refused": dict(refused), "generate_s": round(generated_s, 1),
                    "validate_s": round(time.monotonic() - t0 - generated_s, 1),
                    "example": (parsed[0][0] if parsed else texts[0])[:600]}
                print(json.dumps({config: out["configs"][config]}), flush=True)  # type: ignore[index]
        finally:
            engine.stop()
            store.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
