"""Sandbox fakes: a shell that answers scripted commands, and a clock for limit tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from appliance.testing.policy import ScriptDivergence


@dataclass(frozen=True, slots=True)
class FakeResult:
    """Looks like the sandbox's ExecResult."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0


class FakeShell:
    """A shell that answers scripted commands. `outputs` maps a command to its result: a FakeResult, a
    string (stdout, exit 0), an exception to raise (e.g. SandboxError: the sandbox died) or a callable
    of the command. An unscripted command raises `ScriptDivergence` unless a `default` is given."""

    def __init__(self, outputs: Mapping[str, FakeResult | str | BaseException | Callable[[str], FakeResult]]
                 | None = None, *, default: FakeResult | None = None) -> None:
        self.outputs = dict(outputs or {})
        self.default = default
        self.commands: list[str] = []
        self.timeouts: list[float | None] = []

    def run(self, cmd: str, timeout: float | None = None) -> FakeResult:
        self.commands.append(cmd)
        self.timeouts.append(timeout)
        if cmd not in self.outputs:
            if self.default is None:
                raise ScriptDivergence(f"FakeShell got the unscripted command {cmd!r}; scripted: {list(self.outputs)}")
            return self.default
        out = self.outputs[cmd]
        if isinstance(out, BaseException):
            raise out
        if isinstance(out, str):
            return FakeResult(stdout=out)
        return out(cmd) if callable(out) else out


class FakeClock:
    """A monotonic clock for limit tests: reading it advances time by `step`; `sleep` advances it too."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step, self.slept = 0.0, step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
