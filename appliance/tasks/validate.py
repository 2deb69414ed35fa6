"""Is a task sound? The verifier's pristine run, agent-free validation, admission into the pool.

Task code (setup, reference solution, verifier; self-proposed tasks are written by the policy) and the
agent's leftovers are untrusted. Nothing here shares a host directory with a sandbox: workspaces go in
and out as tar archives built and read in memory (`appliance.sandbox.transfer`), through the 'data'
filter, so links, FIFOs, sockets and devices never reach the host and are named as tampering.

`judge` is how every verdict is reached, in rollouts and in validation alike (a verifier cannot tell them
apart by how it is run): a sandbox scrubbed clean (no process, no file in /tmp, $HOME, /dev/shm,
/dev/mqueue, no SysV IPC), the workspace put in with the task's protected files restored (a changed or
missing one, a planted module shadowing the standard library, a special file: tampering), made
read-only, and the verifier started from outside the workspace: `python3 -I -c` or `bash --noprofile
--norc -c` under `env -i` with a fixed PATH, so nothing in /workspace is imported or sourced unasked.
`verify_workspace` judges a rollout's final workspace in a new sandbox the agent never saw.

`validate_agent_free` decides whether a task may enter the pool. Each stage runs like a rollout: the
sandbox is scrubbed, the task's files are put in, setup runs; the workspace as set up must fail the
verifier; twice, from scratch, setup and the reference solution then make it pass within the task's time
limit with the same score; nothing may need the network. The first failing stage names the reason
(`REASONS`). Reasons starting with "infra:" are the machine's fault, not the task's: retry rather than
reject. `validate_many` does the same for many tasks in parallel, `sandbox.validation_reuse` tasks per
sandbox, scrubbed between them (1: a new sandbox per task, about 2x slower). Any other exception while a task is validated
is that task's rejection and the end of its sandbox; it never touches another task's verdict.

`admit` stores each task with its verdict, near-duplicates of the pool rejected (`appliance.tasks.pool`
holds the fingerprint and the learnable band, which need no sandbox).
"""

from __future__ import annotations

import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError, NotFoundError, SandboxError, TaskFormatError
from appliance.sandbox.transfer import members, overlay, pack_dir, pack_files, shell_get, shell_put, without
from appliance.schemas import Split, Task, TaskStatus
from appliance.tasks.format import TaskSpec
from appliance.tasks.pool import fingerprint

VERIFY_TIMEOUT_S = 60.0
AGENT_UID = 1000
SHELL_PUT_MAX = 256 * 1024  # archives up to this size go through the persistent shell
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A module the agent leaves under one of these names would run inside a Python verifier that imports it
# from the workspace (`python3 test_x.py` puts the script's directory first on sys.path).
SHADOWED = frozenset(sys.stdlib_module_names) | {"sitecustomize", "usercustomize"}

# Rejection reasons, stored verbatim in tasks.reject_reason (tests and the report group by them).
BAD_FORMAT = "bad format"
SETUP_FAILED = "setup failed"
NEEDS_NETWORK = "needs network"
OVER_LIMIT = "exceeds the time limit"
UNTOUCHED_PASSES = "verifier passes the untouched workspace"
VERIFIER_CRASHED = "verifier crashed"
REFERENCE_FAILS = "reference solution fails the verifier"
NONDETERMINISTIC = "non-deterministic verifier"
DUPLICATE = "near-duplicate"
TASK_BROKE_VALIDATION = "task broke validation"
REASONS = (BAD_FORMAT, SETUP_FAILED, NEEDS_NETWORK, OVER_LIMIT, UNTOUCHED_PASSES, VERIFIER_CRASHED,
           REFERENCE_FAILS, NONDETERMINISTIC, DUPLICATE, TASK_BROKE_VALIDATION)

# What a program says when it tried to reach the network from a `--network=none` sandbox.
_NET_ERRORS = re.compile(
    r"network is unreachable|could not resolve|temporary failure in name resolution|name or service not known|"
    r"no address associated|failed to establish a new connection|unable to access 'https?:|no route to host|"
    r"getaddrinfo|could not connect to|connection refused|resolving .* failed", re.I)
_NET_COMMANDS = re.compile(r"\b(curl|wget|pip3? install|apt(-get)? |npm |git clone|ssh |nc |ping )|https?://", re.I)
_SCORE = re.compile(r"^SCORE=\s*([0-9.eE+-]+)\s*$", re.M)

# Starting a sandbox without a door: `Sandbox.start` or `SandboxPool.start`.
SandboxStarter = Callable[..., AbstractContextManager[Any]]


@dataclass(slots=True)
class VerifyResult:
    passed: bool
    score: float | None  # the verifier's SCORE=, else 1.0 / 0.0 from the exit code; None on error
    output: str
    # protected paths the agent changed or removed, and "path (kind)" for what it left that the verifier
    # does not get: special files, links out of the workspace, modules shadowing the standard library
    tampered: list[str] = field(default_factory=list)
    error: str | None = None  # the verifier could not run (its sandbox failed): an infra error
    duration_s: float = 0.0
    timed_out: bool = False  # the verifier ran past VERIFY_TIMEOUT_S on this workspace (the agent's doing)


@dataclass(slots=True)
class Stage:
    name: str
    ok: bool
    detail: str = ""
    duration_s: float = 0.0


@dataclass(slots=True)
class Validation:
    ok: bool
    stages: list[Stage]
    reason: str | None = None  # one of REASONS (possibly with ": detail"), or "infra: ..."

    @property
    def infra(self) -> bool:
        return bool(self.reason and self.reason.startswith("infra:"))

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "reason": self.reason, "stages": [asdict(s) for s in self.stages]}


def _starter(settings: Settings, start: SandboxStarter | None) -> SandboxStarter:
    if start is not None:
        return start
    from appliance.sandbox import Sandbox

    return lambda **kw: Sandbox.start(settings, **kw)


# --- the workspace on the host (rollouts write it before their sandbox starts) ----------------------
def write_workspace(spec: TaskSpec, root: Path) -> None:
    """The task's files under root (a fresh host directory no sandbox sees yet)."""
    for rel in spec.files:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(spec.files[rel])


def restore_protected(spec: TaskSpec, archive: bytes) -> tuple[bytes, list[str]]:
    """Put the protected files back from the task over a workspace archive; return it and the paths the
    agent had changed or removed."""
    return overlay(archive, {rel: spec.files[rel] for rel in spec.protected})


def _drop_planted(spec: TaskSpec, archive: bytes) -> tuple[bytes, list[str]]:
    """Remove modules named like the standard library that the task did not ship (see SHADOWED)."""
    planted = []
    entries = members(archive)
    for name, m in entries.items():
        path = PurePosixPath(name)
        # a directory shadows only as a regular package: namespace portions lose to the real module
        package = m.isdir() and f"{name}/__init__.py" in entries
        stem = path.name.split(".", 1)[0] if path.suffix in (".py", ".pyc", ".so") else (path.name if package else None)
        if stem in SHADOWED and name not in spec.files and not any(f.startswith(name + "/") for f in spec.files):
            planted.append(name)
    if not planted:
        return archive, []
    return without(archive, planted), [f"{p} (module shadowing the standard library)" for p in planted]


# --- running scripts in a sandbox ---------------------------------------------------------------
def _command(script: str) -> str:
    # A subshell per stage: no cwd, variable or function leaks into the shell that drives the sandbox.
    return f"(cd /workspace && exec bash -c {shlex.quote(script)})"


def judge_command(spec: TaskSpec) -> str:
    """The verifier's command line: from outside /workspace, nothing inherited, the workspace read-only."""
    interp = "python3 -I -c" if spec.verify_lang == "python" else "bash --noprofile --norc -c"
    env = f"env -i PATH={SAFE_PATH} HOME=/home/agent USER=agent LANG=C.UTF-8 TERM=dumb"
    return f"chmod -R a-w /workspace; (cd /workspace && exec {env} {interp} {shlex.quote(spec.verify)})"


def judge(sb: Any, spec: TaskSpec, archive: bytes) -> Any:
    """Run the verifier over `archive` (restored and sanitized already) in a scrubbed sandbox."""
    sb.scrub()
    _put(sb, archive)
    return sb.shell().run(judge_command(spec), timeout=VERIFY_TIMEOUT_S)


def _put(sb: Any, archive: bytes) -> None:
    """Through the shell when small (a few ms), else streamed by `podman exec` (bounded memory)."""
    if len(archive) <= SHELL_PUT_MAX:
        shell_put(sb.shell(), archive)
    else:
        sb.put_tar(archive)


def _get(sb: Any) -> tuple[bytes, list[str]]:
    """The workspace out of a sandbox whose processes are dead; through the shell when it fits."""
    sb.scrub(wipe=False)
    got = shell_get(sb.shell())
    return got if got is not None else sb.get_tar("/workspace")


def prepare(spec: TaskSpec, archive: bytes) -> tuple[bytes, list[str]]:
    """What the verifier gets from a final workspace: protected files restored, planted modules removed."""
    restored, tampered = restore_protected(spec, archive)
    cleaned, planted = _drop_planted(spec, restored)
    return cleaned, tampered + planted


def score_of(exit_code: int, stdout: str) -> float:
    found = _SCORE.findall(stdout)
    if found:
        try:
            return min(1.0, max(0.0, float(found[-1])))
        except ValueError:
            pass
    return 1.0 if exit_code == 0 else 0.0


def verify_workspace(settings: Settings, spec: TaskSpec, workspace_dir: Path | str, *,
                     start: SandboxStarter | None = None, dropped: Sequence[str] = (),
                     archive: bytes | None = None) -> VerifyResult:
    """Judge a rollout's final workspace (a host directory no sandbox can reach any more) in a new
    sandbox. `archive`: the same tree as the sanitized archive it was copied out as (`Sandbox.copied_out`),
    judged instead of the directory, whose host copy cannot hold the links the agent made inside it.
    `dropped`: what the copy out of the agent's sandbox left out (`Sandbox.dropped`), recorded
    as tampering. A verifier past its time limit on this workspace is the agent's failure; only a sandbox
    that fails is an error (infra)."""
    t0 = time.monotonic()
    skipped: list[str] = []
    try:
        if archive is None:
            archive, skipped = pack_dir(Path(workspace_dir))
    except OSError as e:
        return VerifyResult(False, None, "", [], f"cannot read the workspace: {e}", time.monotonic() - t0)
    archive, tampered = prepare(spec, archive)
    tampered = tampered + list(dropped) + skipped
    try:
        with _starter(settings, start)() as sb:
            r = judge(sb, spec, archive)
    except ApplianceError as e:
        return VerifyResult(False, None, "", tampered, f"{type(e).__name__}: {e.message}", time.monotonic() - t0)
    output = (r.stdout + ("\n" + r.stderr if r.stderr.strip() else "")).strip()
    if r.timed_out:
        output = (output + f"\n[appliance: the verifier ran past {VERIFY_TIMEOUT_S:g} s on this workspace]").strip()
        return VerifyResult(False, 0.0, output, tampered, None, time.monotonic() - t0, timed_out=True)
    return VerifyResult(r.exit_code == 0, score_of(r.exit_code, r.stdout), output, tampered, None,
                        time.monotonic() - t0)


# --- agent-free validation -------------------------------------------------------------------------
def validate_agent_free(settings: Settings, spec: TaskSpec, *, start: SandboxStarter | None = None) -> Validation:
    """Run the stages in a new sandbox; see the module doc."""
    return validate_many(settings, [spec], parallel=1, start=start)[0]


def validate_many(settings: Settings, specs: list[TaskSpec], *, parallel: int = 4,
                  start: SandboxStarter | None = None, reuse: int | None = None) -> list[Validation]:
    """Validate many tasks with `parallel` sandboxes alive, each used for `reuse` tasks (default
    `sandbox.validation_reuse`).

    Between stages and tasks the sandbox is scrubbed (see `Sandbox.scrub`); one that cannot be cleaned is
    discarded, and so is one in which anything went wrong."""
    starter = _starter(settings, start)
    reuse = reuse or settings.sandbox.validation_reuse
    results: list[Validation | None] = [None] * len(specs)
    todo = iter(range(len(specs)))
    lock = threading.Lock()

    def close(sb: Any) -> None:
        try:
            sb.__exit__(None, None, None)
        except ApplianceError:
            pass

    def worker() -> None:
        sb, used = None, 0
        try:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                spec = specs[i]
                try:
                    spec.check()
                except TaskFormatError as e:
                    results[i] = Validation(False, [Stage("format", False, e.message)], f"{BAD_FORMAT}: {e.message}")
                    continue
                except Exception as e:  # noqa: BLE001 - a spec too broken to check is that task's rejection
                    results[i] = Validation(False, [Stage("format", False, repr(e)[:300])],
                                            f"{BAD_FORMAT}: {type(e).__name__}: {e}"[:300])
                    continue
                stages = [Stage("format", True)]
                try:
                    if sb is None or used >= reuse:
                        if sb is not None:
                            close(sb)
                        sb, used = None, 0
                        sb = starter().__enter__()
                    used += 1
                    reason = _stages(sb, spec, stages)
                    results[i] = Validation(reason is None, stages, reason)
                    if used < reuse:
                        try:
                            sb.scrub()
                        except SandboxError as e:  # left something that outlives a kill and a wipe
                            results[i] = Validation(False, stages, f"{TASK_BROKE_VALIDATION}: {e.message}")
                            close(sb)
                            sb = None
                except ApplianceError as e:
                    stages.append(Stage("sandbox", False, e.message))
                    results[i] = Validation(False, stages, f"infra: {type(e).__name__}: {e.message}")
                    if sb is not None:
                        close(sb)
                    sb = None
                except Exception as e:  # noqa: BLE001 - whatever a task provokes is that task's rejection
                    stages.append(Stage("error", False, f"{type(e).__name__}: {e}"[-600:]))
                    results[i] = Validation(False, stages, f"{TASK_BROKE_VALIDATION}: {type(e).__name__}: {e}"[:300])
                    if sb is not None:
                        close(sb)
                    sb = None
        finally:
            if sb is not None:
                close(sb)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(parallel, len(specs))))]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return [r if r is not None else Validation(False, [], "infra: validation did not run") for r in results]


def _stages(sb: Any, spec: TaskSpec, stages: list[Stage]) -> str | None:
    limit = spec.limits.timeout_s
    files = pack_files(spec.files)
    sh = sb.shell()

    def record(name: str, r: Any, ok: bool | None = None) -> Any:
        stages.append(Stage(name, (r.exit_code == 0 and not r.timed_out) if ok is None else ok, _tail(r), r.duration_s))
        return r

    def failed_run(r: Any, script: str, what: str) -> str:
        if r.timed_out:
            return f"{what} {OVER_LIMIT} ({limit:g} s)"
        text = r.stdout + r.stderr
        if _NET_ERRORS.search(text) or _NET_COMMANDS.search(script):
            return f"{NEEDS_NETWORK}: {what} failed: {_tail(r, 200)}"
        return f"{SETUP_FAILED if what == 'setup' else REFERENCE_FAILS}: {what} exited {r.exit_code}: {_tail(r, 200)}"

    def set_up(recorded: bool) -> str | None:
        """A rollout's start: a clean sandbox, the task's files, setup."""
        sb.scrub()
        _put(sb, files)
        if spec.setup.strip():
            r = sh.run(_command(spec.setup), timeout=limit)
            if recorded:
                record("setup", r)
            if r.exit_code != 0 or r.timed_out:
                why = failed_run(r, spec.setup, "setup")
                return why if recorded else f"{NONDETERMINISTIC}: setup failed the second time: {why}"
        return None

    if (why := set_up(recorded=True)) is not None:
        return why
    untouched, _ = _get(sb)
    r = record("untouched", judge(sb, spec, prepare(spec, untouched)[0]))
    stages[-1].ok = r.exit_code != 0  # this stage succeeds when the verifier says "fail"
    if "Traceback (most recent call last)" in r.stderr:
        return f"{VERIFIER_CRASHED} on the untouched workspace: {_tail(r, 300)}"
    if r.timed_out:
        return f"verifier {OVER_LIMIT} ({VERIFY_TIMEOUT_S:g} s) on the untouched workspace"
    if r.exit_code == 0:
        return UNTOUCHED_PASSES

    scores = []
    for i in (1, 2):
        if (why := set_up(recorded=False)) is not None:
            return why
        r = record(f"reference-{i}", sh.run(_command(spec.solution), timeout=limit))
        if r.timed_out or (r.exit_code != 0 and (_NET_ERRORS.search(r.stdout + r.stderr))):
            return failed_run(r, spec.solution, "reference solution")
        final, dropped = _get(sb)
        archive, tampered = prepare(spec, final)
        if tampered or dropped:
            stages[-1].detail += f"\n(the reference solution changed protected files or left: {', '.join(tampered + dropped)})"
        r = record(f"verify-{i}", judge(sb, spec, archive))
        if r.timed_out:
            return f"verifier {OVER_LIMIT} ({VERIFY_TIMEOUT_S:g} s) after the reference solution"
        if r.exit_code != 0:
            if i == 2:
                return f"{NONDETERMINISTIC}: the reference solution passed once, then failed: {_tail(r, 200)}"
            return f"{REFERENCE_FAILS}: {_tail(r, 300)}"
        scores.append(score_of(r.exit_code, r.stdout))
    if scores[0] != scores[1]:
        return f"{NONDETERMINISTIC}: the reference solution scored {scores[0]} then {scores[1]}"
    return None


def _tail(r: Any, n: int = 600) -> str:
    text = (r.stdout + ("\n" + r.stderr if r.stderr.strip() else "")).strip()
    return text[-n:]


# --- into the pool -----------------------------------------------------------------------------------
def admit(settings: Settings, store: Any, specs: list[TaskSpec], *, run_id: str | None = None,
          split: Split = Split.TRAIN, parallel: int = 4, start: SandboxStarter | None = None,
          seen: set[str] | None = None) -> list[tuple[TaskSpec, Validation]]:
    """Validate tasks agent-free and store each with its verdict: `valid`, or `rejected` with the reason
    (near-duplicates of the pool included). Idempotent: a task already decided is skipped; one left
    `proposed` (a crash, an infra failure) is validated again. `start` may be a `SandboxPool.start`."""
    if seen is None:
        seen = set()
        for t in store.tasks(run_id):
            if t.status != TaskStatus.REJECTED:
                try:
                    seen.add(fingerprint(TaskSpec.from_spec(t.spec)))
                except ApplianceError:
                    continue
    todo: list[TaskSpec] = []
    ids: set[str] = set()
    for spec in specs:
        if spec.id in ids:
            continue
        ids.add(spec.id)
        try:
            status = store.get_task(spec.id).status
        except NotFoundError:
            status = None
        if status not in (None, TaskStatus.PROPOSED):
            continue
        if status is None:
            store.add_task(Task(spec.id, run_id, spec.family, spec.difficulty, spec.source, split,
                                TaskStatus.PROPOSED, spec.to_spec()))
            fp = fingerprint(spec)
            if fp in seen:
                store.add_validation(spec.id, "dedupe", False, DUPLICATE, {"fingerprint": fp})
                store.set_task_status(spec.id, TaskStatus.REJECTED, reason=DUPLICATE)
                continue
            seen.add(fp)
        todo.append(spec)

    results = validate_many(settings, todo, parallel=parallel, start=start)
    for spec, v in zip(todo, results, strict=True):
        for st in v.stages:
            store.add_validation(spec.id, st.name, st.ok, None if st.ok else v.reason,
                                 {"detail": st.detail[-2000:], "duration_s": st.duration_s})
        if v.ok:
            store.set_task_status(spec.id, TaskStatus.VALID)
        elif not v.infra:
            store.set_task_status(spec.id, TaskStatus.REJECTED, reason=v.reason)
    return list(zip(todo, results, strict=True))
