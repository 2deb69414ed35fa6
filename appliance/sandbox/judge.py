"""The verdict channel: run a verifier in a sandbox so that nothing inside can write its outcome.

A verifier of a script or a code-fixing task runs the agent's own code, by design, as the same uid as
itself. Text that code can reach is no verdict: a persistent shell's stdout (with a sentinel the code
can read out of the shell's memory) or the verifier's own stdout (inherited, or opened through
/proc/PID/fd). So the verdict travels another way:

- a fresh `podman exec` whose top process is the launcher (image/judge-launcher.py) started through an
  execute-only interpreter: the kernel makes it non-dumpable, so no process of the sandbox may ptrace
  it, read or write its memory or open its descriptors, and its stdout pipe is held by it and the
  container runtime alone;
- the verifier runs as the launcher's child through an execute-only interpreter too, so the code it
  runs cannot rewrite its exit status either; the launcher reads that status with waitpid;
- a partial score comes only from the verifier's fd 3 (a pipe only it is given: Python's subprocess
  does not pass it on), never from its stdout;
- the launcher kills everything else of the uid when the verifier is done.

What the verifier's own logic concludes from the workspace and from the code it runs is its verdict;
what that code can still do is make the verifier fail (kill it, exhaust its time), never pass.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.errors import SandboxError
from appliance.sandbox.podman import podman_bin, podman_cwd, podman_env

if TYPE_CHECKING:
    from appliance.sandbox.sandbox import Sandbox

LIBEXEC = "/usr/local/libexec/appliance"
LAUNCHER = [f"{LIBEXEC}/judge-python3", "-I", "-S", f"{LIBEXEC}/judge-launcher.py"]
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


def run_judge(sb: Sandbox, lang: str, source: str, *, timeout_s: float, env: dict[str, str]) -> JudgeRun:
    """Run `source` (python or bash) as the verifier over the sandbox's /workspace; see the module doc.

    Raises SandboxError only when the machine failed (the sandbox is gone, podman errors, the image lacks
    the launcher); whatever the workspace's code does ends in a JudgeRun."""
    request = json.dumps({"lang": lang, "source": source, "timeout_s": timeout_s, "env": env,
                          "output_limit": sb.settings.sandbox.output_limit_bytes})
    argv = [podman_bin(), "exec", "-i", "-w", "/", sb.name, *LAUNCHER]
    try:
        proc = subprocess.run(argv, input=request.encode(), capture_output=True, env=podman_env(sb.settings),
                              cwd=podman_cwd(sb.settings), timeout=timeout_s + GRACE_S)
    except subprocess.TimeoutExpired:
        # The launcher enforces the limit inside; an exec that outlives it by GRACE_S is a stuck machine.
        raise SandboxError(f"the verifier's exec in sandbox {sb.name} did not return within {timeout_s + GRACE_S:g} s",
                           "an infra error; check `podman ps` and the machine's load") from None
    err = proc.stderr.decode(errors="replace").strip()
    if proc.returncode == 0:
        try:
            verdict = json.loads(proc.stdout)
        except ValueError:
            raise SandboxError(f"the verifier's launcher in sandbox {sb.name} answered no verdict: {proc.stdout[:200]!r}",
                               "rebuild the sandbox image with `appliance init`") from None
        if verdict.get("error"):
            raise SandboxError(f"sandbox {sb.name}: {verdict['error']}", "rebuild the sandbox image with `appliance init`")
        return JudgeRun(verdict["exit_code"], verdict["stdout"], verdict["stderr"], verdict["duration_s"],
                        verdict["timed_out"], verdict["score_channel"])
    if proc.returncode in (125, 126, 127) or not sb.alive():
        raise SandboxError(f"running the verifier in sandbox {sb.name} failed ({proc.returncode}): {err[-300:]}",
                           "an infra error; if the launcher is missing, rebuild the image with `appliance init`")
    # Killed by a signal while the container lives: only a process inside can have done that.
    return JudgeRun(None, "", err[-2000:], 0.0, killed=f"the verifier's launcher exited {proc.returncode}")
