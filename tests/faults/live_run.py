"""A real `appliance run` (tests/small_run.py) driven from outside, for the fault cases that need the real
engine, sandboxes and trainer: start it, watch its store for a moment, inject a fault, and check at the
end the invariants every case shares (`check_consistent`).

Processes are only ever signalled by the pids this run wrote (its engine's process group from
`$APPLIANCE_HOME/engine.pid`), never by name: other appliances may run on the same machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.practice import engine_failed
from appliance.sandbox import podman_env
from appliance.sandbox.image import image_ref
from appliance.sandbox.podman import podman, write_podman_config
from appliance.schemas import EngineState, Iteration, IterationStatus, Outcome, Phase, RolloutStatus, RunStatus
from appliance.store import Store
from small_run import REPO, small_run_env  # tests/small_run.py (tests/ is on sys.path: its conftest.py)

Moment = Callable[[Store, Iteration | None], bool]


def running(store: Store) -> bool:
    return bool(store.rollouts(status=RolloutStatus.RUNNING))


def calling(store: Store) -> bool:
    """A rollout is running and has already talked to the engine: calls are likely in flight."""
    return any(store.model_calls(r.id) for r in store.rollouts(status=RolloutStatus.RUNNING))


# The moments of a one-iteration run, in the order it passes them.
MOMENTS: dict[str, Moment] = {
    "baseline eval": lambda s, it: bool(it and it.index == 0 and it.phase == Phase.EVALUATE and calling(s)),
    "synthesis": lambda s, it: bool(it and it.index == 1 and it.phase == Phase.SYNTHESIZE),
    "validation": lambda s, it: bool(it and it.index == 1 and it.phase == Phase.VALIDATE),
    "practice": lambda s, it: bool(it and it.index == 1 and it.phase == Phase.PRACTISE and calling(s)),
    "training": lambda s, it: bool(it and it.index == 1 and it.phase == Phase.TRAIN),
    "sync": lambda s, it: bool(it and it.index == 1 and s.engine_state()[0] in
                               (EngineState.SYNCING, EngineState.WAKING, EngineState.CANARY)),
    "eval": lambda s, it: bool(it and it.index == 1 and it.phase == Phase.EVALUATE and calling(s)),
    "diagnosis": lambda s, it: bool(it and it.index == 1 and it.phase == Phase.DIAGNOSE),
}


@dataclass
class LiveRun:
    """One `appliance run --iterations 1 --headless` in a subprocess, restartable, with its log."""

    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    injected: list[str] = field(default_factory=list)  # the moments a fault was injected at
    groups: list[int] = field(default_factory=list)  # engine process groups a fault hit
    stopped: list[int] = field(default_factory=list)  # pids a fault stopped (SIGSTOP)

    @classmethod
    def create(cls, sandbox_settings: Settings, home: Path, tiny_model: Path, log: Path,
               **extra: str) -> LiveRun:
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
        return cls(env | small_run_env(sandbox_settings, home, tiny_model) | extra, log)

    @property
    def settings(self) -> Settings:
        return load_settings(environ=self.env)

    def start(self) -> subprocess.Popen:
        self.started_at = time.time()
        self.proc = subprocess.Popen([str(REPO / ".venv/bin/appliance"), "run", "--iterations", "1", "--headless"],
                                     env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        return self.proc

    def drive(self, faults: list[tuple[str, Callable[[LiveRun], None]]], deadline_s: float) -> int:
        """Run to the end, calling each fault once at its moment (a moment that passed too quickly to
        catch is skipped); returns the exit code of the last process."""
        assert self.proc is not None
        deadline = time.monotonic() + deadline_s
        pending = list(faults)
        settings = self.settings
        while pending and time.monotonic() < deadline and self.proc.poll() is None:
            if settings.db_path.exists():
                store = Store(settings.db_path)
                try:
                    run = store.latest_run()
                    its = store.iterations(run.id) if run else []
                    it = next((i for i in its if i.status != IterationStatus.DONE), None)
                    # a moment is this process's only once it ticks: a phase the store shows from before a
                    # restart is not under way yet (the new process may still be importing or starting up)
                    ticking = any(e.created_at >= self.started_at for e in store.events(kind="phase", limit=100000))
                    due = next((n for n, (name, _) in enumerate(pending) if ticking and MOMENTS[name](store, it)),
                               None)
                finally:
                    store.close()
                if due is not None:
                    name, inject = pending[due]
                    inject(self)
                    self.injected.append(name)
                    del pending[: due + 1]
            time.sleep(0.2)
        return self.proc.wait(timeout=max(60.0, deadline - time.monotonic()))

    def resume(self, timeout_s: float = 1800) -> None:
        """After the operator's fix: `appliance run` again, which must finish the run (exit 0)."""
        proc = self.start()
        assert proc.wait(timeout=timeout_s) == 0, self.tail()

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        signal_pids(self.stopped, signal.SIGKILL)  # a stopped process the appliance failed to end is ours to end

    # --- the engine this run started ---------------------------------------------------------------
    def engine_group(self) -> int:
        return int((self.settings.home / "engine.pid").read_text().strip())

    def engine_processes(self, pgid: int | None = None) -> list[int]:
        """Live pids of the engine's process group (the API server and its EngineCore)."""
        pgid = self.engine_group() if pgid is None else pgid
        return [pid for pid in _pids() if _pgid(pid) == pgid]


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def wait_for(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


def signal_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def fill_disk(folder: Path) -> Path:
    """Leave `folder`'s filesystem with no free byte (a filler file as big as it gets); returns the filler."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: closing it must not fail
        for chunk in (1 << 20, 4096, 1):  # then the last partial megabyte, and the last page
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass
    return filler


def own_image_root(base: Path) -> tuple[Settings, str, Path]:
    """A storage root of its own under `base` holding a copy of the sandbox image (`podman save` reads the
    shared store, which a fault case must never touch); (its settings, the image, the saved archive). The
    caller removes it (`remove_storage_root`)."""
    main = load_settings()
    own = load_settings(environ={"APPLIANCE_HOME": str(base / "home"), "APPLIANCE_PODMAN__GRAPHROOT": str(base / "st"),
                                 "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": "[]"})
    archive = base.parent / f"{base.name}-image.tar"
    ref = image_ref(main)
    saved = podman(main, "save", "-o", str(archive), ref, check=False, timeout=600)
    if saved.returncode != 0:
        pytest.skip(f"no sandbox image to copy: {saved.stderr.decode(errors='replace')[-300:]}")
    write_podman_config(own)
    loaded = podman(own, "load", "-i", str(archive), check=False, timeout=600)
    assert loaded.returncode == 0, loaded.stderr.decode(errors="replace")[-500:]
    return own, ref, archive


def check_consistent(settings: Settings, env: dict[str, str]) -> Store:
    """The invariants every live fault case ends with; returns the open store for case-specific checks."""
    store = Store(settings.db_path)
    run = store.latest_run()
    assert run is not None and run.status == RunStatus.DONE, run
    its = store.iterations(run.id)
    assert [(i.index, i.status) for i in its] == [(0, IterationStatus.DONE), (1, IterationStatus.DONE)]
    rollouts = store.rollouts(run.id)
    assert rollouts and all(r.status == RolloutStatus.FINISHED for r in rollouts)
    for r in rollouts:
        calls = store.model_calls(r.id)
        assert [c.seq for c in calls] == list(range(len(calls))), f"{r.id}: call sequence with a gap or twice"
        if any(engine_failed(c) for c in calls):  # a call the engine failed is never the policy's
            assert r.outcome == Outcome.INFRA_ERROR, (r.id, r.outcome, r.error)
        if r.outcome == Outcome.INFRA_ERROR:  # never in a loss: no samples
            assert store.samples(r.id) == [], r.id
    for index in (0, 1):  # pass@1 counts no infra error, and every other finished eval rollout once
        scored = [r for r in store.rollouts(run.id, iteration=index, purpose="eval")
                  if r.outcome != Outcome.INFRA_ERROR]
        evals = store.evals(run.id, index)
        assert evals and sum(e["n"] for e in evals) == len(scored), (index, evals, len(scored))
    assert store.report(run.id, 0) and store.report(run.id, 1)
    assert len([c for c in store.checkpoints(run.id) if c.iteration == 1]) <= 1
    state, version, _ = store.engine_state()
    assert state == EngineState.STOPPED
    assert version == max((c.policy_version for c in store.checkpoints(run.id)), default=0)
    left = subprocess.run(["podman", "ps", "-aq", "--filter", "label=appliance.sandbox"], capture_output=True,
                          text=True, env=podman_env(settings)).stdout.split()
    assert left == [], f"sandboxes left: {left}"
    engines = subprocess.run(["pgrep", "-f", f"--port {env['APPLIANCE_ENGINE__PORT']}"], capture_output=True, text=True)
    assert engines.stdout.strip() == "", f"engine processes left: {engines.stdout}"
    return store
