"""Running commands in a sandbox: the result record, bounded output capture, the persistent shell.

Output of every stream is kept up to `output_limit_bytes` and the rest counted and dropped, so a command
printing 100 MB costs a bounded amount of memory. The persistent shell (`Shell`) sends many commands
through one long-lived bash: a few ms per command instead of a `podman exec` each.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
import uuid
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from appliance.errors import SandboxError
from appliance.sandbox.judge import LIBEXEC
from appliance.sandbox.podman import check_storage, podman, podman_bin, podman_cwd, podman_env
from appliance.schemas import ExecResult

if TYPE_CHECKING:
    from appliance.sandbox.sandbox import Sandbox

# The execute-only copy of bash (sandbox/judge.py): the kernel makes the shell non-dumpable, so no process
# of the sandbox may open its descriptors through /proc/PID/fd (the pipe it reads the appliance's commands
# from, saved at fd 10 while a command runs) and queue commands of its own, or read its memory.
SHELL = f"{LIBEXEC}/judge-bash"


class Capture:
    """Keeps the first `limit` bytes of a stream and counts the rest, so memory stays bounded.

    With a `token`, the stream ends at the token; the bytes after it up to a newline are the `trailer`
    (the persistent shell prints the exit code there).
    """

    def __init__(self, limit: int, token: bytes | None = None) -> None:
        self.limit, self.token = limit, token
        self.kept = bytearray()
        self.dropped = 0
        self.window = bytearray()
        self.found = False
        self.trailer: bytes | None = None

    def _commit(self, data: bytes | bytearray) -> None:
        room = self.limit - len(self.kept)
        self.kept += data[:room]
        self.dropped += max(0, len(data) - room)

    def feed(self, data: bytes) -> bool:
        """Take a chunk; True once the token and its trailer have arrived."""
        if self.token is None:
            self._commit(data)
            return False
        self.window += data
        if not self.found:
            i = self.window.find(self.token)
            if i < 0:
                keep = len(self.window) - (len(self.token) - 1)
                if keep > 0:
                    self._commit(self.window[:keep])
                    del self.window[:keep]
                return False
            self._commit(self.window[:i])
            del self.window[: i + len(self.token)]
            self.found = True
        j = self.window.find(b"\n")
        if j < 0:
            return False
        self.trailer = bytes(self.window[:j])
        return True

    def text(self) -> str:
        out = self.kept.decode(errors="replace")
        if self.dropped:
            out += f"\n[appliance: output truncated, {self.dropped} more bytes dropped]\n"
        return out


def pump(streams: Mapping[IO[bytes], Capture], deadline: float) -> bool:
    """Read the pipes into their captures until each is done (EOF or token); False on deadline."""
    sel = selectors.DefaultSelector()
    for f in streams:
        sel.register(f, selectors.EVENT_READ)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in sel.select(timeout=left):
                data = os.read(key.fd, 1 << 16)
                if not data or streams[key.fileobj].feed(data):  # type: ignore[index]
                    sel.unregister(key.fileobj)
        return True
    finally:
        sel.close()


class Shell:
    """A persistent bash inside the sandbox: state (cwd, variables) carries over between commands.

    It runs from an execute-only bash (SHELL): nothing in the sandbox can write into its command pipe.
    Each command is sent as an ANSI-C quoted string to `eval` (a syntax error cannot desynchronise the
    protocol), with stdin from /dev/null, followed by a random sentinel on stdout (with the exit code)
    and stderr. A command past its time limit kills the whole session (bash leads its own process
    group); the next `run` starts a fresh one, so cwd and variables reset after a timeout.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0
        self.restarts = 0

    def _open(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [podman_bin(), "exec", "-i", "-w", "/workspace", self._sb.name, SHELL, "--noprofile", "--norc"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=podman_env(self._sb.settings),
            cwd=podman_cwd(self._sb.settings))
        assert proc.stdin and proc.stdout
        proc.stdin.write(b"echo $$\n")  # bash leads its process group: kill -- -PID ends it and its children
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None and proc.stderr else ""
            proc.kill()
            check_storage(self._sb.settings, err)
            if not self._sb.alive():  # the usual cause, and a machine's doing: say so rather than echo b''
                raise SandboxError(f"sandbox {self._sb.name} is gone (killed, or past sandbox.lifetime_s): no shell "
                                   "could start in it", "an infra error: the rollout is excluded from training")
            raise SandboxError(f"could not start a shell in sandbox {self._sb.name}: {line!r} {err}".strip(),
                               "the sandbox may have hit its lifetime; start a new one")
        self._pid = int(line)
        return proc

    def run(self, cmd: str, timeout: float | None = None) -> ExecResult:
        limit = timeout or self._sb.settings.sandbox.exec_timeout_s
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._open()
        proc = self._proc
        assert proc.stdin and proc.stdout and proc.stderr
        token = b"\x1e__appliance_" + uuid.uuid4().hex.encode() + b"__"
        mark = "\\036" + token[1:].decode()
        script = (f"__c={ansi_c_quote(cmd)}\n{{ eval \"$__c\"\n}} </dev/null; "
                  f"printf '{mark}%d\\n' $?; printf '{mark}\\n' >&2\n").encode()
        cap = self._sb.settings.sandbox.output_limit_bytes
        out, err = Capture(cap, token), Capture(cap, token)
        t0 = time.monotonic()
        try:
            proc.stdin.write(script)
            proc.stdin.flush()
        except BrokenPipeError:
            self._proc = None
            return self.run(cmd, timeout)
        finished = pump({proc.stdout: out, proc.stderr: err}, t0 + limit)
        duration = time.monotonic() - t0
        timed_out = not finished
        if timed_out or out.trailer is None:
            self._kill()
            if not timed_out and not self._sb.alive():
                # The session ended without its trailer because the container is gone (killed, lifetime
                # reached, OOM of the whole sandbox): that is the machine's failure, not the command's.
                raise SandboxError(f"sandbox {self._sb.name} died while running a command",
                                   "an infra error: the rollout is excluded from training; check `podman ps -a`")
        code = int(out.trailer) if out.trailer is not None and out.trailer.strip().lstrip(b"-").isdigit() else (
            137 if timed_out else (rc if (rc := proc.poll()) is not None else -1))
        return ExecResult(code, out.text(), err.text(), duration, timed_out, bool(out.dropped or err.dropped))

    def _kill(self) -> None:
        if self._proc is None:
            return
        self.restarts += 1
        if self._pid and self._proc.poll() is None:
            podman(self._sb.settings, "exec", self._sb.name, "kill", "-KILL", "--", f"-{self._pid}", check=False,
                   timeout=30)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    @property
    def pid(self) -> int:
        """The session's bash inside the sandbox (0 before the first command): its process group leader."""
        return self._pid if self._proc is not None and self._proc.poll() is None else 0

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()  # type: ignore[union-attr]
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._proc = None

    def __enter__(self) -> Shell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ansi_c_quote(s: str) -> str:
    out = []
    for ch in s:
        if ch == "\\" or ch == "'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"
