"""Is a task sound? The verifier's pristine run, agent-free validation, dedupe, agent-based banding.

`verify_workspace` is how every episode is judged: a copy of the final workspace, protected files put
back from the task (a changed or missing one is recorded as tampering), the verifier run in a new
sandbox that the agent never saw, no network.

`validate_agent_free` decides whether a task may enter the pool, in one sandbox whose workspace is
reset from the host between stages (with /tmp and $HOME wiped and leftover processes killed), which
costs a few shell commands instead of five sandbox starts: setup runs; the untouched workspace must
fail the verifier; the reference solution must pass it within the task's time limit, twice with the
same score; nothing may need the network. The first failing stage names the reason (`REASONS`).
Reasons starting with "infra:" are the machine's fault, not the task's: retry rather than reject.
`validate_many` does the same for many tasks, reusing each sandbox for several of them.

`dedupe` drops near-duplicates by a normalised fingerprint of instruction + files (digits and case
folded, whitespace collapsed), so two tasks that differ only in a number count as one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError, NotFoundError
from appliance.schemas import Split, Task, TaskStatus
from appliance.tasks.format import TaskFormatError, TaskSpec

VERIFY_TIMEOUT_S = 60.0
AGENT_UID = 1000

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
REASONS = (BAD_FORMAT, SETUP_FAILED, NEEDS_NETWORK, OVER_LIMIT, UNTOUCHED_PASSES, VERIFIER_CRASHED,
           REFERENCE_FAILS, NONDETERMINISTIC, DUPLICATE)

# What a program says when it tried to reach the network from a `--network=none` sandbox.
_NET_ERRORS = re.compile(
    r"network is unreachable|could not resolve|temporary failure in name resolution|name or service not known|"
    r"no address associated|failed to establish a new connection|unable to access 'https?:|no route to host|"
    r"getaddrinfo|could not connect to|connection refused|resolving .* failed", re.I)
_NET_COMMANDS = re.compile(r"\b(curl|wget|pip3? install|apt(-get)? |npm |git clone|ssh |nc |ping )|https?://", re.I)
_SCORE = re.compile(r"^SCORE=\s*([0-9.eE+-]+)\s*$", re.M)

# Starting a sandbox: `Sandbox.start` or `SandboxPool.start`, keyword `workspace`.
SandboxStarter = Callable[..., AbstractContextManager[Any]]


@dataclass(slots=True)
class VerifyResult:
    passed: bool
    score: float | None  # the verifier's SCORE=, else 1.0 / 0.0 from the exit code; None on error
    output: str
    tampered: list[str] = field(default_factory=list)  # protected paths the agent changed or removed
    error: str | None = None  # the verifier could not run (sandbox failure, time limit): an infra error
    duration_s: float = 0.0


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


# --- the workspace on the host -----------------------------------------------------------------
def write_workspace(spec: TaskSpec, root: Path) -> None:
    """The task's files under root (which must exist); the caller's sandbox runs setup."""
    for rel in spec.files:
        _safe_write(root, rel, spec.files[rel])


def _safe_write(root: Path, rel: str, text: str) -> None:
    """Write root/rel without following a link the agent planted (a parent symlinked to /etc, say)."""
    cur = root
    parts = PurePosixPath(rel).parts
    for part in parts[:-1]:
        cur = cur / part
        if cur.is_symlink() or (cur.exists() and not cur.is_dir()):
            cur.unlink()
        cur.mkdir(exist_ok=True)
    target = cur / parts[-1]
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    target.write_text(text)


def restore_protected(spec: TaskSpec, root: Path) -> list[str]:
    """Put the protected files back from the task; return those the agent had changed or removed."""
    tampered = []
    for rel in spec.protected:
        p = root / rel
        try:
            same = (not p.is_symlink() and p.is_file()
                    and hashlib.sha256(p.read_bytes()).hexdigest() == spec.digest(rel))
        except OSError:
            same = False
        if not same:
            tampered.append(rel)
        _safe_write(root, rel, spec.files[rel])
    return tampered


def _chown(root: Path) -> None:
    if os.geteuid() != 0:
        return
    os.lchown(root, AGENT_UID, AGENT_UID)
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(d, name), AGENT_UID, AGENT_UID)


def _reset(dest: Path, src: Path) -> None:
    """Make dest (a live bind mount: keep the directory itself) an exact copy of src."""
    _clear(dest)
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    _chown(dest)


# --- running scripts in a sandbox ---------------------------------------------------------------
def _command(script: str, lang: str = "bash") -> str:
    interp = "python3" if lang == "python" else "bash"
    # A subshell per stage: no cwd, variable or function leaks from one stage into the next.
    return f"(cd /workspace && {interp} -c {shlex.quote(script)})"


# Before every stage: no files in /tmp or $HOME and no process left from the stage before (except init,
# the container's main `sleep`, and the persistent shell running this).
_CLEAN = ("rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* $HOME/* $HOME/.[!.]* $HOME/..?* 2>/dev/null; "
          "for d in /proc/[0-9]*; do p=${d#/proc/}; case $p in 1|$$|$BASHPID) continue;; esac; "
          "[ \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" = 'sleep infinity ' ] && continue; kill -9 $p 2>/dev/null; "
          "done; true")


def _run(sb: Any, script: str, lang: str, timeout: float) -> Any:
    return sb.shell().run(_command(script, lang), timeout=timeout)


def score_of(exit_code: int, stdout: str) -> float:
    found = _SCORE.findall(stdout)
    if found:
        try:
            return min(1.0, max(0.0, float(found[-1])))
        except ValueError:
            pass
    return 1.0 if exit_code == 0 else 0.0


def _verdict(result: Any, tampered: list[str], t0: float) -> VerifyResult:
    output = (result.stdout + ("\n" + result.stderr if result.stderr.strip() else "")).strip()
    if result.timed_out:
        return VerifyResult(False, None, output, tampered, "verifier exceeded its time limit", time.monotonic() - t0)
    return VerifyResult(result.exit_code == 0, score_of(result.exit_code, result.stdout), output, tampered,
                        None, time.monotonic() - t0)


def verify_workspace(settings: Settings, spec: TaskSpec, workspace_dir: Path | str, *,
                     start: SandboxStarter | None = None) -> VerifyResult:
    """Judge a final workspace: copy it, restore protected files from the task, run the verifier in a
    new sandbox (no network). The agent's directory is not modified."""
    t0 = time.monotonic()
    scratch = settings.home / "verify"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        copy = Path(tmp) / "workspace"
        try:
            shutil.copytree(workspace_dir, copy, symlinks=True)
        except (OSError, shutil.Error) as e:
            return VerifyResult(False, None, "", [], f"cannot copy the workspace: {e}", time.monotonic() - t0)
        tampered = restore_protected(spec, copy)
        try:
            with _starter(settings, start)(workspace=copy) as sb:
                result = sb.exec(["python3" if spec.verify_lang == "python" else "bash", "-c", spec.verify],
                                 timeout=VERIFY_TIMEOUT_S)
        except ApplianceError as e:
            return VerifyResult(False, None, "", tampered, f"{type(e).__name__}: {e.message}", time.monotonic() - t0)
        return _verdict(result, tampered, t0)


# --- agent-free validation -------------------------------------------------------------------------
def validate_agent_free(settings: Settings, spec: TaskSpec, *, start: SandboxStarter | None = None) -> Validation:
    """Run the stages in one sandbox (workspace reset from the host between them); see the module doc."""
    return validate_many(settings, [spec], parallel=1, start=start)[0]


def validate_many(settings: Settings, specs: list[TaskSpec], *, parallel: int = 4,
                  start: SandboxStarter | None = None, reuse: int = 25) -> list[Validation]:
    """Validate many tasks with `parallel` sandboxes alive, each reused for up to `reuse` tasks.

    Between tasks (as between stages) the workspace is reset from the host, /tmp and $HOME are wiped and
    every process the previous stage left behind is killed, so a reused sandbox is as clean as a new one
    while costing a few shell commands instead of a container start and removal."""
    starter = _starter(settings, start)
    results: list[Validation | None] = [None] * len(specs)
    todo = iter(range(len(specs)))
    lock = threading.Lock()
    scratch = settings.home / "validate"
    scratch.mkdir(parents=True, exist_ok=True)

    def worker() -> None:
        sb, used = None, 0
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            live = Path(tmp) / "live"
            live.mkdir()
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
                    stages = [Stage("format", True)]
                    try:
                        _clear(live)
                        write_workspace(spec, live)
                        _chown(live)
                        if sb is None or used >= reuse:
                            if sb is not None:
                                sb.__exit__(None, None, None)
                            sb, used = None, 0
                            sb = starter(workspace=live).__enter__()
                        used += 1
                        reason = _stages(sb, spec, live, Path(tmp) / "pristine", stages)
                        results[i] = Validation(reason is None, stages, reason)
                    except ApplianceError as e:
                        stages.append(Stage("sandbox", False, e.message))
                        results[i] = Validation(False, stages, f"infra: {type(e).__name__}: {e.message}")
                        if sb is not None:
                            sb.__exit__(None, None, None)
                        sb = None
            finally:
                if sb is not None:
                    sb.__exit__(None, None, None)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(parallel, len(specs))))]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return [r if r is not None else Validation(False, [], "infra: validation did not run") for r in results]


def _clear(root: Path) -> None:
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _stages(sb: Any, spec: TaskSpec, live: Path, pristine: Path, stages: list[Stage]) -> str | None:
    limit = spec.limits.timeout_s

    def stage(name: str, script: str, lang: str = "bash", timeout: float = limit) -> Any:
        sb.shell().run(_CLEAN, timeout=30)
        r = _run(sb, script, lang, timeout)
        stages.append(Stage(name, r.exit_code == 0 and not r.timed_out, _tail(r), r.duration_s))
        return r

    def failed_run(r: Any, script: str, what: str) -> str:
        if r.timed_out:
            return f"{what} {OVER_LIMIT} ({limit:g} s)"
        text = r.stdout + r.stderr
        if _NET_ERRORS.search(text) or _NET_COMMANDS.search(script):
            return f"{NEEDS_NETWORK}: {what} failed: {_tail(r, 200)}"
        return f"{SETUP_FAILED if what == 'setup' else REFERENCE_FAILS}: {what} exited {r.exit_code}: {_tail(r, 200)}"

    shutil.rmtree(pristine, ignore_errors=True)
    if spec.setup.strip():
        r = stage("setup", spec.setup)
        if r.exit_code != 0 or r.timed_out:
            return failed_run(r, spec.setup, "setup")
    shutil.copytree(live, pristine, symlinks=True)

    _reset(live, pristine)
    r = stage("untouched", spec.verify, spec.verify_lang, VERIFY_TIMEOUT_S)
    stages[-1].ok = r.exit_code != 0  # this stage succeeds when the verifier says "fail"
    if "Traceback (most recent call last)" in r.stderr:
        return f"{VERIFIER_CRASHED} on the untouched workspace: {_tail(r, 300)}"
    if r.timed_out:
        return f"verifier {OVER_LIMIT} ({VERIFY_TIMEOUT_S:g} s) on the untouched workspace"
    if r.exit_code == 0:
        return UNTOUCHED_PASSES

    scores = []
    for i in (1, 2):
        _reset(live, pristine)
        r = stage(f"reference-{i}", spec.solution)
        if r.timed_out or (r.exit_code != 0 and (_NET_ERRORS.search(r.stdout + r.stderr))):
            return failed_run(r, spec.solution, "reference solution")
        tampered = restore_protected(spec, live)
        _chown(live)
        if tampered:
            stages[-1].detail += f"\n(reference solution changed protected files: {', '.join(tampered)})"
        r = stage(f"verify-{i}", spec.verify, spec.verify_lang, VERIFY_TIMEOUT_S)
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


# --- near-duplicates ---------------------------------------------------------------------------------
def fingerprint(spec: TaskSpec) -> str:
    """Instruction + workspace files, lowercased, digits folded to 0 and whitespace collapsed."""
    def norm(s: str) -> str:
        return " ".join(re.sub(r"\d+", "0", s.lower()).split())

    parts = [norm(spec.instruction)] + [f"{norm(k)}={norm(v)}" for k, v in sorted(spec.files.items())]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def dedupe(specs: Iterable[TaskSpec], seen: set[str] | None = None) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """(kept, dropped): the first task of each fingerprint is kept; `seen` (updated) carries earlier pools."""
    seen = set() if seen is None else seen
    kept, dropped = [], []
    for s in specs:
        fp = fingerprint(s)
        (dropped if fp in seen else kept).append(s)
        seen.add(fp)
    return kept, dropped


# --- agent-based validation: the learnable band --------------------------------------------------
def band_status(passed: int, attempts: int, band: tuple[float, float] = (0.0, 1.0)) -> TaskStatus:
    """K rollouts of the current policy: inside the open band (low, high) the task is learnable."""
    rate = passed / attempts if attempts else 0.0
    low, high = band
    if rate <= low:
        return TaskStatus.TOO_HARD
    if rate >= high:
        return TaskStatus.TOO_EASY
    return TaskStatus.LEARNABLE


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


def record_band(store: Any, task_id: str, passed: int, attempts: int,
                band: tuple[float, float] = (0.0, 1.0)) -> TaskStatus:
    """Store the agent-based verdict of a valid task: its band status and pass rate over K rollouts."""
    status = band_status(passed, attempts, band)
    store.add_validation(task_id, "agent", status == TaskStatus.LEARNABLE, None if status == TaskStatus.LEARNABLE
                         else str(status), {"passed": passed, "attempts": attempts, "band": list(band)})
    store.set_task_status(task_id, status, pass_rate=passed / attempts if attempts else 0.0)
    return status
