"""A cap on how many sandboxes are alive at once (settings.sandbox.max_concurrent by default)."""

from __future__ import annotations

import threading
from typing import Any

from appliance.config import Settings
from appliance.sandbox.podman import sweep
from appliance.sandbox.sandbox import Sandbox, _size_bytes, workspace_bytes


class SandboxPool:
    """`with pool.start(workspace=...) as sb:` blocks while `max_concurrent` sandboxes are alive.

    Creating a pool removes the leftovers of a killed appliance (containers whose owner process died);
    sandboxes of other live processes sharing the storage root are left alone.
    """

    def __init__(self, settings: Settings, max_concurrent: int | None = None, *, sweep_orphans: bool = True) -> None:
        self.settings = settings
        self.max_concurrent = max_concurrent or settings.sandbox.max_concurrent
        self._slots = threading.BoundedSemaphore(self.max_concurrent)
        if sweep_orphans:
            sweep(settings, orphans_only=True)

    def start(self, memory: str | None = None, **kwargs: Any) -> Sandbox:
        """Same arguments as `Sandbox.start` (minus settings); the slot frees when the sandbox stops. `memory`:
        a larger limit than sandbox.memory for what runs in this one (a harness's own program)."""
        self._slots.acquire()
        try:
            sb = Sandbox.start(with_memory(self.settings, memory), **kwargs)
        except BaseException:
            self._slots.release()
            raise
        sb.on_stop.append(self._slots.release)
        return sb



def with_memory(settings: Settings, memory: str | None) -> Settings:
    """`settings` with sandbox.memory raised to `memory` where that is more; the workspace keeps its usual cap,
    so the verifier's sandbox (at sandbox.memory) can always take back what this one left."""
    if memory is None or _size_bytes(memory) <= _size_bytes(settings.sandbox.memory):
        return settings
    sandbox = settings.sandbox.model_copy(update={"memory": memory, "workspace_size": str(workspace_bytes(settings))})
    return settings.model_copy(update={"sandbox": sandbox})
