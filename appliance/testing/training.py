"""Training fakes: an engine for the time-sliced LEARN phase, and the multi-process worker that fails."""

from __future__ import annotations

import time
from pathlib import Path

from appliance.errors import EngineError


class FakeEngine:
    """Stands in for appliance.serving.Engine in training and loop tests and benchmarks (`EngineControl`,
    and `appliance.loop.Engine`: its base_url leads nowhere, so nothing may call it).

    Enforces the real engine's order, serving -> pause_for_training -> (load_weights | resume) -> serving,
    and fails loudly on any other: load_weights ends serving by itself (on the new weights, or on the old
    ones after a refused sync, raising EngineError). Optional delays imitate sleep, sync+wake+canary and
    wake. `loaded` lists (path, kind) per successful sync.
    """

    def __init__(self, *, policy_version: int = 0, pause_s: float = 0.0, sync_s: float = 0.0,
                 resume_s: float = 0.0, fail_load: bool = False) -> None:
        self._version = policy_version
        self.delays = {"pause": pause_s, "sync": sync_s, "resume": resume_s}
        self.fail_load = fail_load
        self.serving = True
        self.calls: list[str] = []
        self.loaded: list[tuple[Path, str]] = []
        self.base_url = "http://fake-engine.invalid"

    def model_name(self) -> str:
        return "policy"

    @property
    def policy_version(self) -> int:
        return self._version

    def pause_for_training(self) -> None:
        if not self.serving:
            raise AssertionError(f"pause_for_training while already paused; calls so far: {self.calls}")
        self._step("pause")
        self.serving = False

    def load_weights(self, path: Path, kind: str) -> int:
        if self.serving:
            raise AssertionError(f"load_weights while serving (pause first); calls so far: {self.calls}")
        if kind not in ("lora", "full"):
            raise AssertionError(f"load_weights kind must be 'lora' or 'full', got {kind!r}")
        expected = "adapter_config.json" if kind == "lora" else "config.json"
        if not (Path(path) / expected).exists():
            raise AssertionError(f"{kind} checkpoint at {path} has no {expected}")
        self._step("sync")
        self.serving = True
        if self.fail_load:
            raise EngineError(f"fake engine refused {path}; the previous weights serve on",
                              "FakeEngine(fail_load=True) was asked to fail")
        self.loaded.append((Path(path), kind))
        self._version += 1
        return self._version

    def resume(self) -> None:
        if self.serving:
            raise AssertionError(f"resume while serving; calls so far: {self.calls}")
        self._step("resume")
        self.serving = True

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if self.delays[name]:
            time.sleep(self.delays[name])

# What `appliance.training.multiprocess` launches instead of its worker when a test sets its WORKER to this
# (`appliance.testing.train_worker`: the real worker, except that one rank fails).
FAILING_TRAIN_WORKER = ("appliance.testing.train_worker",)
