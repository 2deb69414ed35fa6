"""The appliance process: the services the loop runs on, and `appliance run`'s wiring of loop, scheduler
and TUI.

`engine_and_proxy` starts the engine and the proxy in front of it (all `appliance serve` needs) and stops
them on the way out; `services` adds the sandbox pool (for the loop, or one debug rollout) and sweeps it;
`run_appliance` runs a loop over them, driven by the scheduler, with the TUI as a window onto the run. The
loop itself (`appliance.loop`) knows none of this.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance import scheduler
from appliance.config import Settings
from appliance.errors import ApplianceError
from appliance.evaluate import learning_curve
from appliance.loop import Loop
from appliance.practice import Practice
from appliance.schemas import RolloutStatus
from appliance.seams import Engine
from appliance.store import Store

if TYPE_CHECKING:
    from appliance.proxy import ProxyServer
    from appliance.serving import Engine as VllmEngine


@dataclass
class Services:
    engine: Engine
    practice: Practice


@contextmanager
def engine_and_proxy(settings: Settings, store: Store, log: Callable[[str], None] = print,
                     port: int | None = None, version: int | None = None) -> Iterator[tuple[VllmEngine, ProxyServer]]:
    """The engine and the proxy in front of it (`port`: None = proxy.port from the settings; `version`: a
    stored policy version to serve instead of the loop's, see `serving.Engine`); both stopped on the way out,
    also when the start fails half-way."""
    from appliance.plan import fit_to_gpus
    from appliance.proxy import ProxyServer, create_app
    from appliance.serving import Engine as VllmEngine

    settings, plan = fit_to_gpus(settings)  # `appliance serve`'s; a run's were fitted before (run_appliance)
    if plan is not None:
        log(f"serving on {plan.gpus} GPU(s) as `appliance plan` says: tensor_parallel_size "
            f"{settings.engine.tensor_parallel_size}, gpu_memory_utilization {settings.engine.gpu_memory_utilization}")
    engine = VllmEngine(settings, store, version=version)
    server = None
    try:
        log(f"starting the engine on {engine.base_url} ({settings.model_path.name}, profile {settings.profile})")
        log(template_line(settings))
        engine.start()
        server = ProxyServer(create_app(store, engine, settings), settings, port=port).start()
        log(f"proxy on {server.url}")
        yield engine, server
    finally:
        if server is not None:
            server.stop()
        engine.stop()


def template_line(settings: Settings) -> str:
    """What the served model's chat template is (`serving.template.describe`), for the start-up log."""
    from appliance.serving.template import describe

    facts = describe(settings.model_path)
    if facts.problem:  # the engine may still serve; demonstrations of this template would all be lost
        return f"warning: chat template {facts.summary()}; no demonstration can be made with it (`appliance doctor`)"
    return f"chat template: {facts.summary()}"


@contextmanager
def services(settings: Settings, store: Store, log: Callable[[str], None] = print,
             version: int | None = None) -> Iterator[Services]:
    """Engine, proxy and sandbox pool, for the loop or one debug rollout (or `appliance eval`, which may serve
    a stored `version`); stopped and swept on the way out."""
    from appliance.sandbox import SandboxPool, image_exists, image_ref, sweep

    if not image_exists(settings):  # else every validation and rollout is an infra error and the run learns nothing
        raise ApplianceError(f"the sandbox image {image_ref(settings)} is not built",
                             "run `appliance init` (or scripts/setup): it builds the image this version needs")
    pool = SandboxPool(settings)  # removes what a killed appliance left behind
    try:
        with engine_and_proxy(settings, store, log, version=version) as (engine, server):
            # learn.EngineControl.load_weights takes kind: str, the engine Literal["lora", "full"] (issue 17)
            yield Services(engine,  # type: ignore[arg-type]
                           Practice(settings, store, server.host, server.port, pool, log))
    finally:
        sweep(settings, orphans_only=True)


STOP_GRACE_S = 30.0  # how long a clean stop waits for the phase in flight before tearing down under it
# A training phase stops at its next step and then saves what it trained (weights, optimizer state): on a
# real model a step and that save take minutes, and tearing down under them loses the training.
STOP_GRACE_TRAIN_S = 900.0


def run_appliance(settings: Settings, *, iterations: int | None = None, headless: bool = True,
                  log: Callable[[str], None] = print, progress: Callable[[str], None] | None = None) -> str:
    """`appliance run`: start the services, let the scheduler drive the loop until the run ends; returns
    the run id. SIGTERM and Ctrl-C stop cleanly; a kill -9 is recovered by the next start."""
    from appliance.plan import fit_to_gpus
    from appliance.serving.text import policy_text

    if iterations is not None:
        settings = settings.model_copy(deep=True)
        settings.loop.iterations = iterations
    # on a GPU server, what the settings leave open comes from the plan (the engine's shape, the micro-batch),
    # for the engine and the loop alike
    settings, plan = fit_to_gpus(settings)
    if plan is not None:
        log(f"{plan.gpus} GPU(s): tensor_parallel_size {settings.engine.tensor_parallel_size}, gpu_memory_utilization "
            f"{settings.engine.gpu_memory_utilization}, sleep_level {settings.engine.sleep_level}, micro_batch_size "
            f"{settings.training.micro_batch_size}, {plan.processes} trainer process(es) (`appliance plan`)")
    store = Store(settings.db_path)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # the lock first: a second process must not start an engine on the port or sweep the sandboxes
        with store.loop_lock(), yielding_cpu(settings.loop.nice), services(settings, store, log) as svc:
            loop = Loop(settings, store, svc.engine, svc.practice, log, generate_text=policy_text(svc.engine))
            # the heartbeat: controls are answered whatever phase runs; `stop --now` ends it as SIGTERM does
            steering = loop.start_steering(on_stop_now=stop.set)
            sched = scheduler.start(loop)
            try:
                if not headless:  # the TUI is a window onto the run: closing it leaves the run going
                    from appliance.tui import run_tui

                    run_tui(settings, run_id=loop.run.id, detach=True, until=stop)
                    if not stop.is_set() and not loop.finished():
                        log(f"TUI closed; run {loop.run.id} goes on headless (`appliance tui` reopens the TUI, "
                            "Ctrl-C or `appliance stop` ends the run)")
                while not stop.is_set() and not loop.finished():
                    if progress:
                        progress(progress_line(store, loop.run.id, scheduler.busy.is_set()))
                    stop.wait(5.0)
            except KeyboardInterrupt:
                pass
            finally:
                # first, so that what the teardown breaks under the phase in flight is not recorded
                svc.practice.stopping.set()
                sched.shutdown(wait=False)
                # a phase in flight sees `stopping` at its next step and returns; tearing the engine and the
                # sandboxes down under it sooner turns its last moments into tracebacks at interpreter exit
                training = (loop.progress() or {}).get("phase") == "train"
                grace = time.monotonic() + (STOP_GRACE_TRAIN_S if training else STOP_GRACE_S)
                while scheduler.busy.is_set() and time.monotonic() < grace:
                    time.sleep(0.2)
                steering.stop()  # last: a request made from now on hears at once that no loop runs
            return loop.run.id
    finally:
        signal.signal(signal.SIGTERM, previous)
        store.close()


@contextmanager
def yielding_cpu(nice: int) -> Iterator[None]:
    """This thread at nice value `nice` (`loop.nice`) while it lasts, and what it starts after: the threads and
    processes of the run (scheduler, engine, trainer, sandboxes) inherit it, so an operator's command or TUI
    gets a core first. Linux keeps a nice value per thread; this one's is put back on the way out where the
    process may lower it again (root may; a user without CAP_SYS_NICE keeps the higher value)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if nice <= before:
        yield
        return
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before)
        except PermissionError:
            pass


def progress_line(store: Store, run_id: str, busy: bool) -> str:
    run = store.get_run(run_id)
    its = store.iterations(run_id)
    it = its[-1] if its else None
    where = f"iteration {it.index} {it.phase}" if it else "starting"
    rollouts = store.rollouts(run_id, iteration=it.index) if it else []
    done = sum(r.status == RolloutStatus.FINISHED for r in rollouts)
    curve = " ".join(f"{p.pass_at_1:.0%}" for _, p in learning_curve(store, run_id)) or "-"
    state, version, _ = store.engine_state()
    return (f"[{run.status}{' working' if busy else ''}] {where} | rollouts {done}/{len(rollouts)} | "
            f"engine {state} v{version} | held-out pass@1 {curve}")
