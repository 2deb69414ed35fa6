"""The seams: every Protocol the rooms meet through, in one place, so what each side may call is written down.

    CommandResult, Shell        what the built-in harness needs of a command and of the agent's shell
    SandboxShell, SandboxAPI    what verification, validation and demonstrations need of a sandbox
    SandboxStarter              starting a sandbox without a door (`Sandbox.start` bound, `SandboxPool.start`)
    EngineControl               what training needs of the engine (pause, load weights, resume)
    ServingEngine               what the proxy needs of the engine (admission, state, the served name)
    Engine                      what the loop needs: training's control, the URL and the served name
    PolicyText                  the policy writing text outside an episode (report analysis, self-proposal)
    ChatTokenizer               a conversation as the served model's training sequences (demonstrations)

The real implementations are `appliance.sandbox.Sandbox` (and its `Shell`) and `appliance.serving.Engine`;
the fakes in `appliance.testing` meet the same Protocols.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from appliance.config import Settings
from appliance.schemas import EngineState, ExecResult


class CommandResult(Protocol):
    """The outcome of one shell command (the sandbox's `ExecResult` has these and more)."""

    @property
    def exit_code(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...
    @property
    def timed_out(self) -> bool: ...


class Shell(Protocol):
    """A persistent shell in the agent's sandbox: state (cwd, variables) carries over between commands.

    Raises an `ApplianceError` (the sandbox's `SandboxError`) when the sandbox itself failed; a command
    that fails or times out is a normal result.
    """

    def run(self, cmd: str, timeout: float | None = None, /) -> CommandResult: ...


class SandboxShell(Protocol):
    """A sandbox's persistent shell, as the sandbox room's own code uses it."""

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


SandboxStarter = Callable[..., SandboxAPI]


class EngineControl(Protocol):
    """What training needs from the engine (appliance.serving.Engine; appliance.testing.FakeEngine)."""

    @property
    def policy_version(self) -> int: ...

    def pause_for_training(self) -> None: ...

    def load_weights(self, path: Path, kind: str) -> int:
        """Load a checkpoint ("lora" adapter folder or "full" model folder), pass the canary; the new version."""
        ...

    def resume(self) -> None: ...


class ServingEngine(Protocol):
    """What the proxy needs from the engine (appliance.serving.Engine is the real one)."""

    base_url: str
    policy_version: int

    @property
    def state(self) -> EngineState: ...

    def model_name(self) -> str: ...

    def try_admit(self) -> bool: ...

    def release(self) -> None: ...


class Engine(EngineControl, Protocol):
    """What the loop needs from the engine beyond training: its URL and the name requests use."""

    base_url: str

    def model_name(self) -> str: ...


class PolicyText(Protocol):
    """The policy writing text outside an episode: the report's analysis (short, greedy) and self-proposal
    (a whole task: more tokens, sampled). `serving.policy_text` in the product; callers on several threads
    at once are served concurrently (the engine batches them)."""

    def __call__(self, prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str: ...


class ChatTokenizer(Protocol):
    """A conversation as training sequences (token ids, mask 1 on what the assistant sampled), tokenized as the
    engine would see it (`serving.template.ChatTemplate` in the product); the assistant turns numbered in
    `untrained` (0 = the first) are context only. Raises `ApplianceError` for a conversation it cannot render."""

    def __call__(self, messages: list[dict[str, Any]], *, untrained: Collection[int] = (),
                 tools: list[dict[str, Any]] | None = None) -> list[tuple[list[int], list[int]]]: ...
