"""The verdict channel: run a verifier in a sandbox so that nothing inside can write its outcome.

A verifier of a script or a code-fixing task runs the agent's own code, by design. Text that code can
reach is no verdict: a persistent shell's stdout (with a sentinel the code can read out of the shell's
memory) or the verifier's own stdout (inherited, or opened through /proc/PID/fd). So the verdict travels
another way:

- a `podman exec --user 0 --privileged` whose top process is the launcher (one per sandbox, serving each
  verdict in turn; image/judge-launcher.py): root, which first narrows its capabilities to KILL, SETUID,
  SETGID, CHOWN and DAC_READ_SEARCH (the container itself grants none: podman would hand a container's
  added capabilities to its non-root user as ambient ones), so no process of the sandbox may signal it
  (`kill -STOP` included), ptrace it, or open its descriptors; its stdout pipe is held by it and the
  container runtime alone; still under the container's seccomp filter and no-new-privileges;
- two uids: the verifier runs as the launcher's child dropped to the judge's uid (1001), over a workspace
  the launcher hands to the judge for the run (owner judge, group agent, read-only: the agent's own
  permissions copied to the group); the code under test runs as the agent's uid (1000), in a child the
  launcher forks when the verifier asks on its fd 5 (`appliance_check.run_as_agent`), whose only outputs
  are its stdout, stderr and exit status, and which ends with every process of the agent's uid. Code of
  one uid can neither signal nor ptrace a process of the other, nor write a file the other owns, so the
  code under test can neither kill nor stop the verifier, nor rewrite what it reads while it reads it.
  Chosen over a second sandbox per verdict (a `podman exec` and a workspace copy per call: hundreds of
  ms) and over a copy of the workspace per call (a script's output files would land in the copy);
- the verifier runs from an execute-only interpreter: it is not dumpable, so what it runs directly
  (as the judge: the task author's decision to trust it; the families never do) can neither rewrite its
  exit status nor read its memory or descriptors; the launcher reads that status with waitpid;
- the verifier's source (its expectations) is never in its argv or environment, which any process may
  read (/proc/PID/cmdline): it arrives as a sealed memfd on fd 4 that the bootstrap below reads and closes;
- a partial score comes only from the verifier's fd 3, never from its stdout; the Python bootstrap makes
  fds 3 and 5 close-on-exec, so nothing the verifier starts (os.system included) holds them;
- the launcher kills everything else of the sandbox when the verifier is done and gives what the judge
  owns back to the agent's uid (the host's scrubs run as that uid).

What the verifier's own logic concludes from the workspace and from the code it runs is its verdict.
Code it runs directly (as the judge) can still make it fail: kill it, or stop it, which the launcher
ends at the time limit as the agent's `verifier_timeout`. A launcher that falls silent while its
sandbox lives is judged the same way (no process inside can reach it), never as the machine's failure.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from dataclasses import dataclass

from appliance.errors import SandboxError
from appliance.sandbox.podman import check_storage, podman_bin, podman_cwd, podman_env
from appliance.seams import SandboxAPI

LIBEXEC = "/usr/local/libexec/appliance"
LAUNCHER = [f"{LIBEXEC}/judge-python3", "-I", "-S", f"{LIBEXEC}/judge-launcher.py"]
# The verifier's source arrives on fd 4; these bootstraps (all that its argv shows) read it, close it, run it.
PY_BOOT = ("import os, sys\n"
           "for fd in (3, 5):\n"  # the score and run-as-agent channels reach no process it starts
           "    try:\n        os.set_inheritable(fd, False)\n"
           "    except OSError:\n        pass\n"
           "with open(4, 'rb') as f:\n    code = compile(f.read(), '<verifier>', 'exec')\n"
           "del f\n"
           "exec(code, {'__name__': '__main__', '__builtins__': __builtins__})\n")
BASH_BOOT = "IFS= read -r -d '' __verifier <&4; exec 4<&-; eval \"$__verifier\""
INTERPRETERS = {"python": [f"{LIBEXEC}/judge-python3", "-I", "-c", PY_BOOT],
                "bash": [f"{LIBEXEC}/judge-bash", "--noprofile", "--norc", "-c", BASH_BOOT]}
# The host waits this much longer than the verifier's own limit before it calls the exec stuck.
GRACE_S = 20.0


@dataclass(slots=True)
class JudgeRun:
    """What the launcher saw of one verifier run."""

    exit_code: int | None  # None when the verifier died of a signal (or the launcher was killed)
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    score_channel: str = ""  # what the verifier wrote to fd 3
    killed: str | None = None  # the launcher itself died: a process of the sandbox killed it


class _Session:
    """The sandbox's launcher, kept for its next verifier run: one `podman exec` per sandbox, not per verdict."""

    def __init__(self, sb: SandboxAPI) -> None:
        # (privileged: capabilities of this one process, which it narrows to KILL, SETUID and SETGID at once; the
        # container grants none, so no other exec, the agent's included, ever has one)
        self.proc = subprocess.Popen([podman_bin(), "exec", "-i", "--user", "0", "--privileged", "-w", "/", sb.name,
                                      *LAUNCHER],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=podman_env(sb.settings), cwd=podman_cwd(sb.settings))
        self.buffer = b""
        first = self.line(time.monotonic() + GRACE_S)
        if first is None or not first.strip().isdigit():
            err = self.close()
            detail = (first or b"").decode(errors="replace")[:300] or err
            check_storage(sb.settings, detail)
            raise SandboxError(f"the verifier's launcher in sandbox {sb.name} did not start: {detail}",
                               "rebuild the sandbox image with `appliance init`; check `podman ps`")
        self.pid = int(first)

    def line(self, deadline: float) -> bytes | None:
        """The next line the launcher prints; None at EOF (it died) or past the deadline."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            data = os.read(fd, 1 << 20)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def close(self) -> str:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read().decode(errors="replace")[-300:] if self.proc.stderr else ""


_sessions: dict[str, _Session] = {}
_sessions_lock = threading.Lock()


def _session(sb: SandboxAPI) -> _Session:
    with _sessions_lock:
        session = _sessions.get(sb.name)
    if session is not None and session.proc.poll() is None:
        return session
    session = _Session(sb)
    with _sessions_lock:
        _sessions[sb.name] = session
    sb.spared.clear()
    sb.spared.add(session.pid)  # a scrub between two verdicts leaves the launcher alone
    sb.on_stop.append(lambda: _end(sb))
    return session


def _end(sb: SandboxAPI) -> None:
    sb.spared.clear()
    with _sessions_lock:
        session = _sessions.pop(sb.name, None)
    if session is not None:
        session.close()


def run_judge(sb: SandboxAPI, lang: str, source: str, *, timeout_s: float, env: dict[str, str],
              spare: tuple[int, ...] = (), own: tuple[str, ...] = ()) -> JudgeRun:
    """Run `source` (python or bash) as the verifier over the sandbox's /workspace; see the module doc.

    `spare`: pids the launcher leaves alive when it ends the sandbox's other processes (the driving shell).
    `own`: paths besides /workspace that the judge gets for the run (a question's answer file).
    Raises SandboxError only when the machine failed (the sandbox is gone, podman errors, the image lacks
    the launcher); whatever the workspace's code does ends in a JudgeRun."""
    session = _session(sb)
    request = json.dumps({"argv": INTERPRETERS[lang], "source": source, "timeout_s": timeout_s, "env": env,
                          "spare": list(spare), "own": list(own),
                          "output_limit": sb.settings.sandbox.output_limit_bytes})
    try:
        assert session.proc.stdin is not None
        session.proc.stdin.write(request.encode() + b"\n")
        session.proc.stdin.flush()
        line = session.line(time.monotonic() + timeout_s + GRACE_S)
    except OSError:
        line = None
    if line is not None:
        try:
            verdict = json.loads(line)
        except ValueError:
            _end(sb)
            raise SandboxError(f"the verifier's launcher in sandbox {sb.name} answered no verdict: {line[:200]!r}",
                               "rebuild the sandbox image with `appliance init`") from None
        if verdict.get("error"):
            _end(sb)
            raise SandboxError(f"sandbox {sb.name}: {verdict['error']}",
                               "rebuild the sandbox image with `appliance init`")
        return JudgeRun(verdict["exit_code"], verdict["stdout"], verdict["stderr"], verdict["duration_s"],
                        verdict["timed_out"], verdict["score_channel"])
    try:  # EOF: the launcher died, and its exec client follows within moments
        session.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    alive_launcher = session.proc.poll() is None
    err = session.close() if not alive_launcher else ""
    _end(sb)
    if alive_launcher:
        if not sb.alive():
            raise SandboxError(f"sandbox {sb.name} died while its verifier ran",
                               "an infra error; check `podman ps -a` and the machine's memory")
        # The launcher enforces the limit inside and nothing inside can stop it; silent past it while its
        # sandbox lives, the verifier is judged as one that ran out of time on this workspace.
        return JudgeRun(None, "", f"[appliance: no verdict within {timeout_s + GRACE_S:g} s]", timeout_s + GRACE_S,
                        timed_out=True)
    code = session.proc.returncode
    if code in (125, 126, 127) or not sb.alive():
        check_storage(sb.settings, err)
        raise SandboxError(f"running the verifier in sandbox {sb.name} failed ({code}): {err}",
                           "an infra error; if the launcher is missing, rebuild the image with `appliance init`")
    # Killed by a signal while the container lives: only a process inside can have done that.
    return JudgeRun(None, "", err[-2000:], 0.0, killed=f"the verifier's launcher exited {code}")
