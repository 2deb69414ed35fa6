"""Is a task sound? The verifier's pristine run, agent-free validation, admission into the pool.

Task code (setup, reference solution, verifier; self-proposed tasks are written by the policy) and the
agent's leftovers are untrusted. Nothing here shares a host directory with a sandbox: workspaces go in
and out as tar archives built and read in memory (`appliance.sandbox.transfer`), through the 'data'
filter, so links, FIFOs, sockets and devices never reach the host and are named as tampering.

Every verdict, here and in rollouts, is reached by `appliance.tasks.verify.judge` (the verdict channel
and what it trusts are described there).

`validate_agent_free` decides whether a task may enter the pool. Each stage runs like a rollout: the
sandbox is scrubbed, the task's files are put in, setup runs; the workspace as set up must fail the
verifier, with a score strictly below the reference's (a verifier that pays for doing nothing is
refused); twice, from scratch, setup and the reference solution then make it pass within the task's time
limit; nothing may need the network; the task's files must fit the sandbox's workspace. The first failing stage
names the reason
(`REASONS`). Reasons starting with "infra:" are the machine's fault, not the task's: retry rather than
reject. `validate_many` does the same for many tasks in parallel, `sandbox.validation_reuse` tasks per
sandbox, scrubbed between them (1: a new sandbox per task, about 2x slower). Any other exception while a task
is validated
is that task's rejection and the end of its sandbox; it never touches another task's verdict.

`admit` stores each task with its verdict, near-duplicates of the pool rejected (`appliance.tasks.pool`
holds the fingerprint and the learnable band, which need no sandbox).
"""

from __future__ import annotations

import re
import shlex
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.errors import (
    ApplianceError,
    NotFoundError,
    SandboxError,
    SandboxNotClean,
    SandboxStorageFull,
    TaskFormatError,
)
from appliance.sandbox.sandbox import workspace_bytes
from appliance.sandbox.transfer import MAX_MEMBERS, capped, pack_files, reroot, shell_get, tmpfs_bytes
from appliance.schemas import Split, TaskStatus
from appliance.seams import SandboxAPI
from appliance.tasks.format import TaskSpec
from appliance.tasks.harbor import task_image
from appliance.tasks.pool import fingerprint
from appliance.tasks.verify import (
    SandboxStarter,
    VerifyResult,
    cannot_run,
    judge,
    partial_score,
    passed,
    prepare,
    put,
    starter,
    verify_workspace,
    written_score,
)

__all__ = ["REASONS", "SandboxStarter", "Stage", "Validation", "VerifyResult", "admit", "validate_agent_free",
           "validate_many", "verify_workspace", "write_workspace"]

# Rejection reasons, stored verbatim in tasks.reject_reason (tests and the report group by them).
BAD_FORMAT = "bad format"
SETUP_FAILED = "setup failed"
NEEDS_NETWORK = "needs network"
OVER_LIMIT = "exceeds the time limit"
UNTOUCHED_PASSES = "verifier passes the untouched workspace"
UNTOUCHED_SCORES = "verifier scores the untouched workspace as high as the reference"
VERIFIER_CRASHED = "verifier crashed"
REFERENCE_FAILS = "reference solution fails the verifier"
NONDETERMINISTIC = "non-deterministic verifier"
DUPLICATE = "near-duplicate"
TASK_BROKE_VALIDATION = "task broke validation"
TOO_LARGE = "workspace too large"
REASONS = (BAD_FORMAT, SETUP_FAILED, NEEDS_NETWORK, OVER_LIMIT, UNTOUCHED_PASSES, UNTOUCHED_SCORES, VERIFIER_CRASHED,
           REFERENCE_FAILS, NONDETERMINISTIC, DUPLICATE, TASK_BROKE_VALIDATION, TOO_LARGE)

# What a program says when it tried to reach the network from a `--network=none` sandbox.
_NET_ERRORS = re.compile(
    r"network is unreachable|could not resolve|temporary failure in name resolution|name or service not known|"
    r"no address associated|failed to establish a new connection|unable to access 'https?:|no route to host|"
    r"getaddrinfo|could not connect to|connection refused|resolving .* failed", re.I)
_NET_COMMANDS = re.compile(r"\b(curl|wget|pip3? install|apt(-get)? |npm |git clone|ssh |nc |ping )|https?://", re.I)


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


# --- the workspace on the host (rollouts write it before their sandbox starts) ----------------------
def write_workspace(spec: TaskSpec, root: Path) -> None:
    """The task's files under root (a fresh host directory no sandbox sees yet)."""
    for rel in spec.files:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(spec.files[rel])


def _command(script: str) -> str:
    # A subshell per stage: no cwd, variable or function leaks into the shell that drives the sandbox.
    return f"(cd /workspace && exec bash -c {shlex.quote(script)})"


def _get(sb: SandboxAPI) -> tuple[bytes, list[str]]:
    """The workspace out of a sandbox whose processes are dead, rooted like `pack_dir`'s archive; through
    the shell when it fits, else streamed by `podman exec` (which names members `workspace/...`)."""
    sb.scrub(wipe=False)
    got = shell_get(sb.shell(), cap=workspace_bytes(sb.settings))
    if got is not None:
        return got
    data, dropped = sb.get_tar("/workspace")
    return reroot(data, "workspace"), dropped


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
    start_sandbox = starter(settings, start)
    cap = workspace_bytes(settings)
    reuse = reuse or settings.sandbox.validation_reuse
    results: list[Validation | None] = [None] * len(specs)
    todo = iter(range(len(specs)))
    lock = threading.Lock()
    storage_full: list[SandboxStorageFull] = []

    def close(sb: SandboxAPI) -> None:
        try:
            sb.__exit__(None, None, None)
        except ApplianceError:
            pass

    def worker() -> None:
        sb, used, sb_kw = None, 0, {}
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
                # what the files take where they go: the archive, and a tmpfs that holds each in whole pages
                size = max(len(pack_files(spec.files)), tmpfs_bytes(len(t.encode()) for t in spec.files.values()))
                if size > cap or len(spec.files) > MAX_MEMBERS:
                    results[i] = Validation(False, stages + [Stage("size", False, f"{size} bytes")],
                                            f"{TOO_LARGE}: its {len(spec.files)} files take {size} bytes, the "
                                            f"sandbox's workspace holds {cap} (sandbox.workspace_size) and "
                                            f"{MAX_MEMBERS} files")
                    continue
                try:
                    kw = task_image(spec)  # a task with its own environment gets a sandbox of its image
                    if sb is None or used >= reuse or kw != sb_kw:
                        if sb is not None:
                            close(sb)
                        sb, used = None, 0
                        sb, sb_kw = start_sandbox(**kw).__enter__(), kw
                    used += 1
                    reason = _stages(sb, spec, stages)
                    results[i] = Validation(reason is None, stages, reason)
                    if used < reuse:
                        try:
                            sb.scrub()
                        except SandboxStorageFull:
                            raise
                        except SandboxError as e:  # left something that outlives a kill and a wipe
                            results[i] = Validation(False, stages, f"{TASK_BROKE_VALIDATION}: {e.message}")
                            close(sb)
                            sb = None
                except SandboxStorageFull as e:  # no task can be validated: none is decided, the phase fails
                    storage_full.append(e)
                    return
                except SandboxNotClean as e:  # what the task started would not die: its doing
                    stages.append(Stage("sandbox", False, e.message))
                    results[i] = Validation(False, stages, f"{TASK_BROKE_VALIDATION}: {e.message}")
                    if sb is not None:
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
    if storage_full:
        raise storage_full[0]
    return [r if r is not None else Validation(False, [], "infra: validation did not run") for r in results]


def _stages(sb: SandboxAPI, spec: TaskSpec, stages: list[Stage]) -> str | None:
    limit, setup_limit, verifier_limit = (spec.limits.command_timeout_s, spec.limits.setup_timeout_s,
                                          spec.limits.verifier_timeout_s)
    files = pack_files(spec.files)
    sh = sb.shell()

    def record(name: str, r: Any, ok: bool | None = None) -> Any:
        stages.append(Stage(name, (r.exit_code == 0 and not r.timed_out) if ok is None else ok, _tail(r), r.duration_s))
        return r

    def failed_run(r: Any, script: str, what: str) -> str:
        if r.timed_out:
            return f"{what} {OVER_LIMIT} ({setup_limit if what == 'setup' else limit:g} s)"
        text = r.stdout + r.stderr
        if _NET_ERRORS.search(text) or _NET_COMMANDS.search(script):
            return f"{NEEDS_NETWORK}: {what} failed: {_tail(r, 200)}"
        return f"{SETUP_FAILED if what == 'setup' else REFERENCE_FAILS}: {what} exited {r.exit_code}: {_tail(r, 200)}"

    def set_up(recorded: bool) -> str | None:
        """A rollout's start: a clean sandbox, the task's files, setup."""
        sb.scrub()
        put(sb, files)
        if spec.setup.strip():
            r = sh.run(_command(spec.setup), timeout=setup_limit)
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
    stages[-1].ok = not passed(r)  # this stage succeeds when the verifier says "fail"
    if cannot_run(spec, r):
        return f"{VERIFIER_CRASHED} on the untouched workspace: {_tail(r, 300)}"
    if r.timed_out:
        return f"verifier {OVER_LIMIT} ({verifier_limit:g} s) on the untouched workspace"
    if r.killed:
        return f"{TASK_BROKE_VALIDATION}: {r.killed} on the untouched workspace"
    if passed(r):
        return UNTOUCHED_PASSES
    floor = partial_score(r)

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
            stages[-1].detail += ("\n(the reference solution changed protected files or left: "
                                  f"{', '.join(capped(tampered + dropped))})")
        # a question task's reference answers on its standard output
        j = record(f"verify-{i}", judge(sb, spec, archive, r.stdout if spec.answer else ""))
        if j.timed_out:
            return f"verifier {OVER_LIMIT} ({verifier_limit:g} s) after the reference solution"
        if not passed(j):
            if cannot_run(spec, j):
                return f"{VERIFIER_CRASHED} after the reference solution: {_tail(j, 300)}"
            if i == 2:
                return f"{NONDETERMINISTIC}: the reference solution passed once, then failed: {_tail(j, 200)}"
            return f"{REFERENCE_FAILS}: {_tail(j, 300)}"
        written = written_score(j)
        scores.append(1.0 if written is None else written)
    if scores[0] != scores[1]:
        return f"{NONDETERMINISTIC}: the reference solution scored {scores[0]} then {scores[1]}"
    if floor >= scores[0]:
        # Rollouts that change nothing would earn what solving earns (or more): the verifier is inverted.
        return f"{UNTOUCHED_SCORES}: {floor:g} untouched, {scores[0]:g} after the reference solution"
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
                    seen.add(fingerprint(TaskSpec.of(t)))
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
            store.add_task(spec.task_row(run_id, split, task_id=spec.id))
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
