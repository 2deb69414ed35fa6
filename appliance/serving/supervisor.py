"""The engine's supervisor: a thread that restarts a vLLM server that died, stopped answering or hangs.

vLLM's /health only reads a flag: a hung EngineCore leaves it at 200 while every request waits for ever, so
`process.probe` generates one token. The checks run without the engine's operation lock (a hanging probe
never holds up a sync or a stop); a restart takes it and skips when the process changed meanwhile.

Never while the engine sleeps (SLEEPING, SYNCING): the trainer holds the accelerator then, and a server
started there would land on its GPUs. A death then is recorded once, and the engine starts the server
again when it is next needed (`Engine.resume`, or the sync, on the weights it brings).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import httpx

from appliance.errors import ApplianceError, StoreError
from appliance.schemas import EngineState, Event
from appliance.serving import process

if TYPE_CHECKING:
    from appliance.serving.engine import Engine

CHECK_S = 2.0  # how often the process and /health are looked at
ASLEEP = (EngineState.SLEEPING, EngineState.SYNCING)


def supervise(engine: Engine) -> None:
    failures, probed = 0, time.monotonic()
    noted = None  # the dead process whose death while asleep is recorded already
    while not engine._stopping.wait(CHECK_S):
        proc, why = engine._proc, None
        if proc is None:
            continue
        if proc.poll() is not None:
            if engine.state in ASLEEP:
                if noted is not proc:
                    noted = proc
                    _note(engine, f"the engine process died while the engine was {engine.state.value} (exit code "
                                  f"{proc.poll()}); it starts again when serving is next needed, not on the "
                                  "trainer's accelerator")
                continue
            why = "the engine process died"
        elif engine.state == EngineState.SERVING:
            try:
                ok = engine._http.get("/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                ok = False
            failures = 0 if ok else failures + 1
            if failures >= 3:
                why = "the engine stopped answering /health"
            elif time.monotonic() - probed >= process.PROBE_S:
                probed = time.monotonic()
                try:
                    why = process.probe(engine._http, engine.settings, engine.canary_prompt()[:1])
                except (ApplianceError, httpx.HTTPError):
                    pass  # no prompt (the engine is restarting under us): the other checks decide
        elif engine.state == EngineState.FAILED:
            why = "the engine failed"
        if why is None or not engine._op.acquire(blocking=False):
            continue  # a sync or restart is running and watches the process itself
        try:
            # the state is read again under the lock: a pause may have put the engine to sleep meanwhile
            if not engine._stopping.is_set() and engine._proc is proc and engine.state not in ASLEEP:
                failures, probed = 0, time.monotonic()
                restart(engine, why)
        except StoreError:  # the store cannot record it (disk full, locked): the thread must live on
            pass
        finally:
            engine._op.release()


def restart(engine: Engine, why: str) -> None:
    code = engine._proc.poll() if engine._proc else None
    message = f"{why} (exit code {code}); restarting it" if code is not None else f"{why}; restarting it"
    engine.store.add_event(Event("error", message, data={"component": "engine", "log": str(engine.log_path)}))
    if engine.state != EngineState.FAILED:
        engine._set(EngineState.FAILED, error=message)
    engine._set(EngineState.STARTING)
    try:
        engine._launch()
    except ApplianceError as e:
        engine._set(EngineState.FAILED, error=e.message)
        return
    engine._set(EngineState.SERVING, policy_version=engine.policy_version, weights=engine._weights.to_json())


def _note(engine: Engine, message: str) -> None:
    try:
        engine.store.add_event(Event("error", message, data={"component": "engine", "log": str(engine.log_path)}))
    except StoreError:
        pass
