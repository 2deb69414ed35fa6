"""The verdict: how a workspace is judged, in rollouts and in validation alike.

`judge` is how every verdict is reached (a verifier cannot tell a rollout from validation by how it is
run): a sandbox scrubbed clean, the workspace put in as the host prepared it (`prepare`: the task's
protected files restored, modules shadowing the standard library removed, git configuration that runs
programs removed: `appliance.tasks.gitsafe`), made read-only, and the verifier run through the
sandbox's verdict channel (`appliance.sandbox.judge`): a launcher no process of the sandbox can reach,
which reads the verifier's exit status with waitpid and its partial score from its private fd 3. The
verifier runs as the judge's uid over a workspace the judge owns; the code under test it runs through
`appliance_check.run_as_agent` runs as the agent's uid, out of reach of both.

What the verdict trusts: the verifier's own logic. Pass means its process exited 0 within its time
limit. A pass scores 1.0; a failure scores the partial credit the verifier wrote to fd 3 (`SCORE=x`,
the last one counts), at most FAILED_SCORE_MAX, so a failure always earns less than a pass (and nothing
for a self-proposed task, whose verifier the policy wrote). Nothing
the workspace's code prints, and no text on any shared stream, enters the verdict.

`verify_workspace` judges a rollout's final workspace in a new sandbox the agent never saw.
"""

from __future__ import annotations

import base64
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from appliance.config import Settings
from appliance.errors import ApplianceError, SandboxStorageFull
from appliance.sandbox.judge import JudgeRun, run_judge
from appliance.sandbox.transfer import capped, members, overlay, pack_dir, shell_put, without
from appliance.seams import SandboxAPI, SandboxStarter
from appliance.tasks.format import ANSWER_FILE, TaskSpec
from appliance.tasks.gitsafe import GIT_ENV, defuse_git
from appliance.tasks.harbor import task_image

SHELL_PUT_MAX = 256 * 1024  # archives up to this size go through the persistent shell
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A failing verifier's partial credit is capped here, strictly below a pass (1.0): the procedural
# verifiers' ok/n of up to 9 checks stays as it is.
FAILED_SCORE_MAX = 0.9
# Tasks whose verifiers the policy wrote: pass or fail, no partial credit.
NO_PARTIAL_CREDIT = frozenset({"self_proposed"})
ANSWER_MAX_BYTES = 64 * 1024  # a question task's answer is a line or a few, not a file
# A module the agent leaves under one of these names would run inside a Python verifier that imports it
# from the workspace (`python3 test_x.py` puts the script's directory first on sys.path); a conftest.py
# would run inside a pytest that a task's tests start from the workspace (Harbor's test.sh often does).
SHADOWED = frozenset(sys.stdlib_module_names) | {"sitecustomize", "usercustomize", "conftest"}
_SCORE = re.compile(r"^SCORE=\s*([0-9.eE+-]+)\s*$", re.M)
# A python verifier that cannot run at all (as opposed to one that fails by assert or exception).
_CANNOT_RUN = re.compile(r"^(SyntaxError|IndentationError|TabError|ImportError|ModuleNotFoundError)\b", re.M)

@dataclass(slots=True)
class VerifyResult:
    passed: bool
    score: float | None  # 1.0 on pass, else the verifier's partial credit (capped); None on error
    output: str
    # protected paths the agent changed or removed, and "path (kind)" for what it left that the verifier
    # does not get: special files, links out of the workspace, modules shadowing the standard library
    tampered: list[str] = field(default_factory=list)
    error: str | None = None  # the verifier could not run (its sandbox failed): an infra error
    duration_s: float = 0.0
    timed_out: bool = False  # the verifier ran past its limit on this workspace (the agent's doing)


def starter(settings: Settings, start: SandboxStarter | None) -> SandboxStarter:
    if start is not None:
        return start
    from appliance.sandbox import Sandbox

    return lambda **kw: Sandbox.start(settings, **kw)


# --- what the verifier gets ------------------------------------------------------------------------
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


def prepare(spec: TaskSpec, archive: bytes) -> tuple[bytes, list[str]]:
    """What the verifier gets from a final workspace: protected files restored, planted modules removed,
    git configuration that would run programs taken out (each named as tampering)."""
    restored, tampered = restore_protected(spec, archive)
    cleaned, planted = _drop_planted(spec, restored)
    defused, git = defuse_git(cleaned, spec.files)  # a file the task shipped is not the agent's doing
    return defused, tampered + planted + git


# --- running the verifier ------------------------------------------------------------------------
def judge_env() -> dict[str, str]:
    """The verifier's whole environment: nothing inherited, a fixed PATH, git told to ignore what it
    would otherwise read from outside the repository and to run no hooks or monitors."""
    # (the verifier runs as the image's judge user, whose home is empty and read-only)
    return {"PATH": SAFE_PATH, "HOME": "/home/judge", "USER": "judge", "LANG": "C.UTF-8", "TERM": "dumb", **GIT_ENV}


def judge(sb: SandboxAPI, spec: TaskSpec, archive: bytes, answer: str = "") -> JudgeRun:
    """Run the verifier over `archive` (prepared already) in a scrubbed sandbox, read-only; a question
    task's `answer` is the read-only file ANSWER_FILE."""
    sb.scrub()
    put(sb, archive)
    shell = sb.shell()
    env = judge_env()
    # Read-only, the agent's permissions copied to the group: the launcher hands the tree to the judge (owner)
    # with the agent's group, so the code under test reads what the agent could, and what the agent made
    # unreadable stays so.
    script = "chmod -R g=u,a-w /workspace"
    own: tuple[str, ...] = ()
    if spec.answer:
        data = base64.b64encode(answer.encode()[:ANSWER_MAX_BYTES]).decode()
        script += f"; printf %s {data} | base64 -d > {ANSWER_FILE}; chmod 0444 {ANSWER_FILE}"
        env["ANSWER_FILE"] = ANSWER_FILE
        own = (ANSWER_FILE,)
    shell.run(script, timeout=30)
    # The driving shell is spared (the next stage scrubs with it): it was as reachable to the code the
    # verifier runs before this channel existed, and a scrub that does not come out clean discards the sandbox.
    return run_judge(sb, spec.verify_lang, spec.verify, timeout_s=spec.limits.verifier_timeout_s, env=env,
                     spare=(shell.pid,), own=own)


def put(sb: SandboxAPI, archive: bytes) -> None:
    """Through the shell when small (a few ms), else streamed by `podman exec` (bounded memory)."""
    if len(archive) <= SHELL_PUT_MAX:
        shell_put(sb.shell(), archive)
    else:
        sb.put_tar(archive)


def passed(r: JudgeRun) -> bool:
    return r.exit_code == 0 and not r.timed_out and r.killed is None


def written_score(r: JudgeRun) -> float | None:
    """The last SCORE= the verifier wrote to its fd 3, in [0, 1]; None without one."""
    found = _SCORE.findall(r.score_channel)
    try:
        return min(1.0, max(0.0, float(found[-1]))) if found else None
    except ValueError:
        return None


def partial_score(r: JudgeRun) -> float:
    score = written_score(r)
    return 0.0 if score is None else score


def score_of(r: JudgeRun, spec: TaskSpec | None = None) -> float:
    """1.0 for a pass; a failure's partial credit, capped below a pass. A failure of a task the policy
    proposed scores 0: its verifier could pay partial credit for any behaviour (deleting files, leaving a
    .bashrc) and still validate."""
    if spec is not None and spec.source in NO_PARTIAL_CREDIT:
        return 1.0 if passed(r) else 0.0
    return 1.0 if passed(r) else min(partial_score(r), FAILED_SCORE_MAX)


def cannot_run(spec: TaskSpec, r: JudgeRun) -> bool:
    """The verifier could not run at all (a syntax error, a missing module or interpreter): a crash, where an
    uncaught AssertionError or any other non-zero exit is a plain failure."""
    if r.exit_code in (126, 127):
        return True
    # (a syntax error in `python3 -c` prints no "Traceback" line: only the last line tells)
    return spec.verify_lang == "python" and r.exit_code == 1 and bool(
        _CANNOT_RUN.match(r.stderr.rstrip().rsplit("\n", 1)[-1]))


def output_of(r: JudgeRun, limit_s: float) -> str:
    text = (r.stdout + ("\n" + r.stderr if r.stderr.strip() else "")).strip()
    if r.timed_out:
        text += f"\n[appliance: the verifier ran past {limit_s:g} s on this workspace]"
    if r.killed:
        text += f"\n[appliance: {r.killed}: a process in the workspace killed it]"
    return text.strip()


def verify_workspace(settings: Settings, spec: TaskSpec, workspace_dir: Path | str, *,
                     start: SandboxStarter | None = None, dropped: Sequence[str] = (),
                     archive: bytes | None = None, answer: str = "") -> VerifyResult:
    """Judge a rollout's final workspace (a host directory no sandbox can reach any more) in a new
    sandbox. `archive`: the same tree as the sanitized archive it was copied out as (`Sandbox.copied_out`),
    judged instead of the directory, whose host copy cannot hold the links the agent made inside it.
    `dropped`: what the copy out of the agent's sandbox left out (`Sandbox.dropped`), recorded
    as tampering. `answer`: what the agent submitted with, for a question task. A verifier past its time
    limit on this workspace is the agent's failure; only a sandbox
    that fails is an error (infra)."""
    t0 = time.monotonic()
    skipped: list[str] = []
    try:
        if archive is None:
            archive, skipped = pack_dir(Path(workspace_dir))
    except OSError as e:
        return VerifyResult(False, None, "", [], f"cannot read the workspace: {e}", time.monotonic() - t0)
    archive, tampered = prepare(spec, archive)
    tampered = capped(tampered + list(dropped) + skipped)
    try:
        with starter(settings, start)(**task_image(spec)) as sb:  # a task's own environment, if it has one
            r = judge(sb, spec, archive, answer)
    except SandboxStorageFull:  # no verifier can run anywhere: the caller's phase fails, nothing is decided
        raise
    except ApplianceError as e:
        return VerifyResult(False, None, "", tampered, f"{type(e).__name__}: {e.message}", time.monotonic() - t0)
    return VerifyResult(passed(r), score_of(r, spec), output_of(r, spec.limits.verifier_timeout_s), tampered, None,
                        time.monotonic() - t0, timed_out=r.timed_out)
