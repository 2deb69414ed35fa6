"""A cap on how many sandboxes are alive at once (settings.sandbox.max_concurrent by default)."""

from __future__ import annotations

import threading
from typing import Any

from appliance.config import Settings
from appliance.sandbox.podman import sweep
from appliance.sandbox.sandbox import Sandbox


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

    def start(self, **kwargs: Any) -> Sandbox:
        """Same arguments as `Sandbox.start` (minus settings); the slot frees when the sandbox stops."""
        self._slots.acquire()
        try:
            sb = Sandbox.start(self.settings, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        sb.on_stop.append(self._slots.release)
        return sb
