"""The sandbox seam: what verification, validation and demonstrations need of a sandbox.

`Sandbox` (sandbox.py) is the one implementation; code above this room types its sandboxes with
`SandboxAPI` (and starts them with a `SandboxStarter`) instead of `Any`, so what it may call is written
down and checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from appliance.config import Settings
from appliance.sandbox.shell import ExecResult


class SandboxShell(Protocol):
    """A sandbox's persistent shell."""

    def run(self, cmd: str, timeout: float | None = None) -> ExecResult: ...

    @property
    def pid(self) -> int: ...


class SandboxAPI(Protocol):
    name: str
    settings: Settings
    dropped: list[str]  # what the last copy out left out (the agent's doing: tampering)
    copied_out: bytes | None  # the sanitized archive of the last copy out
    spared: set[int]  # pids a scrub leaves alive (the verdict launcher)
    on_stop: list[Callable[[], None]]  # called when the sandbox is removed

    def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str = "/workspace",
             env: Mapping[str, str] | None = None) -> ExecResult: ...

    def shell(self) -> SandboxShell: ...

    def scrub(self, *, wipe: bool = True) -> None: ...

    def put_tar(self, data: bytes, dest: str = "/workspace") -> None: ...

    def get_tar(self, src: str = "/workspace") -> tuple[bytes, list[str]]: ...

    def alive(self) -> bool: ...

    def __enter__(self) -> SandboxAPI: ...

    def __exit__(self, exc_type: object, *exc: object) -> None: ...


# Starting a sandbox without a door: `Sandbox.start` (settings bound) or `SandboxPool.start`.
SandboxStarter = Callable[..., SandboxAPI]
