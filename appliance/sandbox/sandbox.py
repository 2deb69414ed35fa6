"""One sandbox: a hardened, labelled Podman container whose /workspace is a size-capped tmpfs.

`Sandbox.start(...)` runs the container detached with every limit from `settings.sandbox`; a host
`workspace` directory is copied in as a tar stream after the start and copied back out (through the
'data' filter) when the `with` block ends without an exception, so no host directory is ever shared with
task code and the workspace cannot grow past `sandbox.workspace_size`. `exec` runs one command under
`timeout -s KILL` inside (killing a `podman exec` client would not kill its process); `shell()` keeps one
bash for many commands; `put`/`get` move files and trees as tar streams through `podman exec`, so paths
resolve inside the container and a symlink planted by the agent cannot reach host files. Sandboxes
without a model door run a small reaper as PID 1 instead of `--init` + `sleep`, so `scrub()` can kill
every other process (`kill -9 -1` never reaches PID 1). `stop()` removes the container; a live-sandbox
registry removes the rest at exit and on SIGTERM.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.config import Settings
from appliance.errors import SandboxError, SandboxNotClean
from appliance.sandbox.door import DOOR_PORT, DoorListener, ModelDoor
from appliance.sandbox.image import image_ref
from appliance.sandbox.podman import LABEL, OWNER_LABEL, check_storage, podman, podman_bin, podman_cwd, podman_env
from appliance.sandbox.shell import Capture, Shell, pump
from appliance.sandbox.transfer import capped, ignored_by_tar, members, pack_dir, reroot, sanitize, unpack
from appliance.schemas import ExecResult

SECCOMP_PROFILE = Path(__file__).parent / "seccomp.json"
# PID 1 of a sandbox without a door: reaps every orphan and cannot be signalled from inside (the kernel
# drops signals to a namespace's init that it has no handler for), so `kill -9 -1` leaves it alone.
REAPER = ("import os, signal\n"
          "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})\n"
          "while True:\n"
          "    try:\n"
          "        while os.waitpid(-1, os.WNOHANG)[0] > 0: pass\n"
          "    except ChildProcessError: pass\n"
          "    signal.sigwait({signal.SIGCHLD})\n")
# Between two uses of one sandbox: every process but PID 1 and this shell killed (kill(-1) is atomic
# against fork: a child of a dying parent is never created), every writable place emptied (the root is
# read-only; /workspace, /tmp, $HOME, /dev/shm, /dev/mqueue and SysV IPC are all there is), then checked.
# Builtins only, and no `sleep`: the pids limit may still be exhausted here, and a fork that fails makes
# bash retry for up to 15 s. A zombie is dead (PID 1 reaps it), so it is not counted as left.
_LEFT = """__left=""; for __d in /proc/[0-9]*; do __p=${__d#/proc/}; case "$__spare" in *" $__p "*) continue;; esac
  read -r __st 2>/dev/null < "$__d/stat" || continue; __st=${__st##*) }; \
[ "${__st%% *}" = Z ] || __left="$__left $__p"; done"""
KILL_ALL = """__spare=" 1 $$ "
kill -9 -1 2>/dev/null; kill -9 -1 2>/dev/null
for ((__i = 0; __i < 1000; __i++)); do
  LEFT
  [ -z "$__left" ] && break; kill -9 -1 2>/dev/null
done
cd /workspace
if [ -z "$__left" ]; then echo "kill: clean"; else echo "kill: left processes[$__left]"; fi""".replace("LEFT", _LEFT)
# The same, sparing the verdict launcher: per-process kills, round after round until nothing else is left
# (a process forked between two rounds is caught by the next; the pids limit bounds how many there are).
KILL_ALL_BUT = """__spare=" 1 $$ SPARED "
__killall() { for __d in /proc/[0-9]*; do __p=${__d#/proc/}; \
case "$__spare" in *" $__p "*) ;; *) kill -9 $__p 2>/dev/null;; esac; done; }
__killall; __killall
for ((__i = 0; __i < 1000; __i++)); do
  LEFT
  [ -z "$__left" ] && break; __killall
done
cd /workspace
if [ -z "$__left" ]; then echo "kill: clean"; else echo "kill: left processes[$__left]"; fi""".replace("LEFT", _LEFT)
WIPE = """__dirs="/workspace /tmp $HOME /dev/shm /dev/mqueue"
[ -w /workspace ] || chmod u+rwx /workspace  # the verifier's read-only workspace, emptied already
find $__dirs -mindepth 1 -delete 2>/dev/null || \
{ chmod -R u+rwx $__dirs 2>/dev/null; find $__dirs -mindepth 1 -delete; }
__wiped=$?
__ipc() { __n=0; for __f in /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem; do \
mapfile -t __l < $__f; (( __n += ${#__l[@]} - 1 )); done; }
__ipc; (( __n > 0 )) && { ipcrm -a 2>/dev/null; __ipc; }
if [ $__wiped = 0 ] && [ $__n = 0 ] && [ -w /workspace ]; then echo "wipe: clean"; \
else echo "wipe: left files (find exit $__wiped), $__n IPC objects"; fi"""

AGENT_UID = 1000
# timeout(1) puts itself and the command in a new process group; when it returns, whatever the command
# left running in that group (a backgrounded fork bomb, a server holding stdout open) is killed too.
# Only `kill` (a builtin) runs after the command, so this works even when the pids limit is exhausted.
_EXEC_WRAPPER = ('timeout -s KILL "$0" "$@" & p=$!; { wait $p; } 2>/dev/null; rc=$?; '
                 'kill -KILL -- -$p 2>/dev/null; exit $rc')
DOOR_MOUNT = "/door"
# A podman exec client that outlives the in-sandbox timeout by this much is stuck; kill it host-side.
CLIENT_GRACE_S = 15.0


def _size_bytes(size: str) -> int:
    """podman's memory notation ("512m", "1g", "1048576") in bytes."""
    units = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = size.strip().lower()
    try:
        return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)
    except (ValueError, IndexError):
        raise SandboxError(f"sandbox.memory = {size!r} is not a size",
                           'use a number with a unit, e.g. "512m" or "2g"') from None


def workspace_bytes(settings: Settings) -> int:
    """The cap of /workspace: `sandbox.workspace_size`, else a quarter of the sandbox's memory."""
    ws = settings.sandbox.workspace_size
    return _size_bytes(ws) if ws else _size_bytes(settings.sandbox.memory) // 4


_live: dict[str, Sandbox] = {}
_live_lock = threading.RLock()  # re-entered when SIGTERM arrives while the main thread holds it
_cleanup_installed = False


def _stop_all() -> None:
    with _live_lock:
        boxes = list(_live.values())
    # One `podman rm` per storage root: at shutdown, 32 sandboxes one by one would take ~10 s.
    roots: dict[Path, list[Sandbox]] = {}
    for sb in boxes:
        roots.setdefault(sb.settings.podman_dir, []).append(sb)
    for group in roots.values():
        podman(group[0].settings, "rm", "-f", "-t", "0", "--ignore", *(sb.name for sb in group),
               check=False, timeout=120)
        for sb in group:
            sb.stop(removed=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    _stop_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _install_cleanup() -> None:
    """Remove live sandboxes at interpreter exit and on SIGTERM (kill -9 is the sweep's and --timeout's job)."""
    global _cleanup_installed
    if _cleanup_installed:
        return
    _cleanup_installed = True
    atexit.register(_stop_all)
    # Only take SIGTERM over when nobody else handles it (a server framework may have its own handler).
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


class Sandbox:
    """A running sandbox; use `with Sandbox.start(settings, ...) as sb:` so it is always removed."""

    def __init__(self, settings: Settings, name: str, workspace: Path | None,
                 door: DoorListener | None, socket_dir: Path | None) -> None:
        self.settings, self.name, self.workspace = settings, name, workspace
        self._door, self._socket_dir = door, socket_dir
        self._shell: Shell | None = None
        # The scrub's own shell in a sandbox that will be copied out (opened before any task code runs): the
        # agent's commands run in `shell()`, where they may redefine what a scrub relies on (`kill`, its
        # variables), and a process bomb would keep a new one from starting.
        self._control: Shell | None = None
        self._stopped = False
        self.on_stop: list[Callable[[], None]] = []
        # What the last copy out of the sandbox left out (FIFOs, devices, sockets, links out of the tree):
        # the agent's doing, recorded as tampering by the verifier's caller.
        self.dropped: list[str] = []
        # The sanitized archive of the last copy out, rooted at the copied tree: the host copy holds no
        # links, so a verifier judging a tree whose in-tree links matter (`ln -s`) must get it from here.
        self.copied_out: bytes | None = None
        # Processes a scrub leaves alive besides PID 1 and the shell: the verdict launcher (sandbox/judge.py),
        # kept from one verdict to the next (it is not dumpable: what runs here cannot reach into it).
        self.spared: set[int] = set()
        # The door's relay (PID 1's child under `--init`): scrubs spare it, or catatonit ends the container.
        self._relay: int | None = None

    @classmethod
    def start(cls, settings: Settings, workspace: Path | None = None, image: str | None = None,
              door: ModelDoor | None = None, labels: Mapping[str, str] | None = None) -> Sandbox:
        name = f"appliance-{uuid.uuid4().hex[:12]}"
        ref = image or image_ref(settings)
        contents = None
        if workspace is not None:
            workspace = Path(workspace).resolve()
            if not workspace.is_dir():
                raise SandboxError(f"workspace {workspace} does not exist or is not a directory",
                                   "create the directory first, or omit the workspace for an empty one")
            # Read before the sandbox exists: task code never runs while the host reads this directory.
            contents, _ = pack_dir(workspace)
        listener, socket_dir, sb = None, None, None
        try:
            if door is not None:
                socket_dir = settings.sockets_dir / name
                socket_dir.mkdir(parents=True, mode=0o755)
                listener = door.listen(socket_dir / "door.sock")
            sb = cls(settings, name, workspace, listener, socket_dir)
            with _live_lock:
                _live[name] = sb
            _install_cleanup()
            sb._run(ref, labels or {})
            if contents is not None:
                sb._control = Shell(sb)
                sb._control.run("true", timeout=30)
                sb.put_tar(contents)
            if listener is not None and not listener.ready.wait(10):
                raise SandboxError(f"the model door relay in sandbox {name} did not come up within 10 s",
                                   "check that the image is current: run `appliance init`")
            if listener is not None and sb._control is not None:
                sb._relay = sb._find_relay()
            return sb
        except BaseException:
            if sb is not None:
                sb.stop()
            else:
                if listener is not None:
                    listener.close()
                if socket_dir is not None:
                    shutil.rmtree(socket_dir, ignore_errors=True)
            raise

    def _run(self, ref: str, labels: Mapping[str, str]) -> None:
        s = self.settings.sandbox
        mem = _size_bytes(s.memory)
        args = ["run", "-d", "--rm", "--name", self.name, "--pull=never",
                "--label", f"{LABEL}=1", "--label", f"{OWNER_LABEL}={os.getpid()}",
                *(a for k, v in labels.items() for a in ("--label", f"{k}={v}")),
                "--network=none", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                *([f"--security-opt=seccomp={SECCOMP_PROFILE}"] if s.block_user_namespaces else []),
                "--read-only", "--read-only-tmpfs=false",
                # tmpfs pages count against --memory and cannot be swapped out: full tmpfs mounts must
                # leave room for processes, or the sandbox could never start another command.
                "--tmpfs", f"/tmp:rw,nosuid,nodev,size={mem // 4}",
                "--tmpfs", f"/home/agent:rw,nosuid,nodev,size={mem // 8},mode=0700,U",
                f"--memory={s.memory}", f"--memory-swap={s.memory}", f"--pids-limit={s.pids_limit}",
                # The workspace lives inside the sandbox: no host directory is shared with task code, and
                # its pages count against --memory, so it can fill neither the host disk nor the store.
                "--tmpfs", f"/workspace:rw,nosuid,nodev,size={workspace_bytes(self.settings)},mode=0755,U",
                f"--cpus={s.cpus}", f"--user={AGENT_UID}:{AGENT_UID}",
                f"--timeout={s.lifetime_s}", "--log-driver=none", "--hostname=sandbox", "--workdir=/workspace"]
        if self._socket_dir is not None:
            args += ["--init", "-v", f"{self._socket_dir}:{DOOR_MOUNT}:ro"]
            cmd = ["python3", "/usr/local/bin/appliance-door", str(DOOR_PORT), f"{DOOR_MOUNT}/door.sock"]
        else:
            cmd = ["python3", "-c", REAPER]
        errors: list[str] = []
        check_storage(self.settings)
        for attempt in range(self.settings.sandbox.start_retries + 1):
            proc = podman(self.settings, *args, ref, *cmd, check=False, timeout=120)
            if proc.returncode == 0:
                return
            err = proc.stderr.decode(errors="replace").strip()
            if "image not known" in err or "no such image" in err.lower():
                raise SandboxError(f"sandbox image {ref} is not built", "run `appliance init` (builds it offline)")
            check_storage(self.settings, err)  # a full storage root: no retry helps
            errors.append(f"attempt {attempt + 1}: {err}")
            podman(self.settings, "rm", "-f", "-t", "0", "--ignore", self.name, check=False, timeout=60)
            time.sleep(0.2 * (attempt + 1))
        raise SandboxError(f"sandbox {self.name} failed to start: " + " | ".join(errors),
                           "`appliance doctor` runs a sandbox end to end and explains podman problems")

    def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str = "/workspace",
             env: Mapping[str, str] | None = None) -> ExecResult:
        """Run one command; killed inside after `timeout` s; each stream capped at output_limit_bytes.

        Processes the command leaves in the background die when it returns; keep a server running
        across commands with `shell()` instead.
        """
        limit = timeout or self.settings.sandbox.exec_timeout_s
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        envs = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        full = [podman_bin(), "exec", "-w", cwd, *envs, self.name, "bash", "-c", _EXEC_WRAPPER, f"{limit:g}", *argv]
        cap = self.settings.sandbox.output_limit_bytes
        out, err = Capture(cap), Capture(cap)
        t0 = time.monotonic()
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=podman_env(self.settings), cwd=podman_cwd(self.settings))
        assert proc.stdout and proc.stderr
        finished = pump({proc.stdout: out, proc.stderr: err}, t0 + limit + CLIENT_GRACE_S)
        if not finished:
            proc.kill()
        code = proc.wait()
        duration = time.monotonic() - t0
        # timeout(1) exits 137 after SIGKILL of the command; an OOM kill also gives 137, but sooner.
        timed_out = not finished or (code in (124, 137) and duration >= limit)
        if code == 125 or (code == 255 and not out.kept and b"Error" in err.kept):
            check_storage(self.settings, err.text())
            raise SandboxError(f"podman exec in sandbox {self.name} failed: {err.text().strip()}",
                               "the sandbox is gone (lifetime reached or removed); start a new one")
        return ExecResult(code, out.text(), err.text(), duration, timed_out, bool(out.dropped or err.dropped))

    def alive(self) -> bool:
        """Whether the container still runs (it may have been killed, or reached its lifetime)."""
        if self._stopped:
            return False
        proc = podman(self.settings, "container", "inspect", "--format", "{{.State.Running}}", self.name,
                      check=False, timeout=30)
        return proc.returncode == 0 and proc.stdout.strip() == b"true"

    def shell(self) -> Shell:
        """The sandbox's persistent shell (one per sandbox, created on first use)."""
        if self._shell is None:
            self._shell = Shell(self)
        return self._shell

    def put(self, src: Path | str | bytes, dest: str) -> None:
        """Copy a host file or directory tree (or bytes) to `dest` inside, owned by the agent."""
        target = PurePosixPath(dest)
        with tempfile.TemporaryFile() as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                if isinstance(src, bytes):
                    info = tarfile.TarInfo(target.name)
                    info.size, info.mode, info.mtime = len(src), 0o644, int(time.time())
                    tar.addfile(info, io.BytesIO(src))
                else:
                    if not Path(src).exists():
                        raise SandboxError(f"cannot put {src}: it does not exist", "pass an existing file or directory")
                    tar.add(str(src), arcname=target.name)
            buf.seek(0)
            proc = subprocess.run(
                [podman_bin(), "exec", "-i", self.name, "sh", "-c",
                 'mkdir -p "$1" && tar -x --no-same-owner --no-same-permissions -C "$1"', "sh", str(target.parent)],
                stdin=buf, capture_output=True, env=podman_env(self.settings), timeout=300)
        if proc.returncode != 0:
            check_storage(self.settings, proc.stderr.decode(errors="replace"))
            raise SandboxError(f"put {dest} into sandbox {self.name} failed: "
                               f"{proc.stderr.decode(errors='replace').strip()}",
                               "the destination must be writable by the agent: /workspace, /tmp or /home/agent")

    def put_tar(self, data: bytes, dest: str = "/workspace") -> None:
        """Extract a tar archive (built on the host) at `dest` inside, as the agent."""
        proc = subprocess.run([podman_bin(), "exec", "-i", self.name, "tar", "-x", "--no-same-owner", "-C", dest],
                              input=data, capture_output=True, env=podman_env(self.settings), timeout=300)
        if proc.returncode != 0:
            check_storage(self.settings, proc.stderr.decode(errors="replace"))
            raise SandboxError(f"copying into {dest} of sandbox {self.name} failed: "
                               f"{proc.stderr.decode(errors='replace').strip()[-500:]}",
                               "the sandbox may be gone, or the workspace larger than sandbox.workspace_size")

    def get_tar(self, src: str = "/workspace") -> tuple[bytes, list[str]]:
        """The tree at `src` as a sanitized archive, and what was left out (see `transfer.sanitize`).

        Files the agent made unreadable are left out, not an error: a workspace the agent broke is the
        agent's failure, never the machine's. Sparse files travel as their data blocks (`tar -S`), the
        archive is read as a stream from a temporary file, and files past the workspace's cap in logical
        bytes, or members past `transfer.MAX_MEMBERS`, are left out and named."""
        source = PurePosixPath(src)
        with tempfile.TemporaryFile() as buf:
            proc = subprocess.run([podman_bin(), "exec", self.name, "tar", "-c", "-S", "--ignore-failed-read",
                                   "-C", str(source.parent), source.name],
                                  stdout=buf, stderr=subprocess.PIPE, env=podman_env(self.settings), timeout=300)
            err = proc.stderr.decode(errors="replace")
            if proc.returncode not in (0, 1):  # 1: a file changed while it was read
                check_storage(self.settings, err)
                raise SandboxError(f"get {src} from sandbox {self.name} failed: {err.strip()[-500:]}",
                                   "check the path with sb.exec('ls -la ...')")
            buf.seek(0)
            data, dropped = sanitize(buf, workspace_bytes(self.settings))
        if source.name not in members(data):  # --ignore-failed-read also forgives a missing source
            raise SandboxError(f"get {src} from sandbox {self.name} failed: {err.strip()[-500:] or 'nothing there'}",
                               "check the path with sb.exec('ls -la ...')")
        return data, capped(dropped + ignored_by_tar(err))

    def get(self, src: str, local_dest: Path | str) -> Path:
        """Copy a file or directory tree from inside to exactly `local_dest` on the host (replaced if present).

        The archive comes from the untrusted side: `transfer.sanitize` drops paths and links pointing out of
        the tree, devices and FIFOs (named in `self.dropped`); links are not recreated on the host."""
        source, dest = PurePosixPath(src), Path(local_dest)
        data, self.dropped = self.get_tar(src)
        self.copied_out = reroot(data, source.name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            unpack(data, Path(tmp))
            if dest.is_symlink() or dest.is_file():
                dest.unlink()
            elif dest.exists():
                shutil.rmtree(dest)
            os.replace(Path(tmp) / source.name, dest)
        return dest

    def _find_relay(self) -> int:
        """The door relay's pid before task code runs: PID 1's only child then (`podman exec`'s are not)."""
        assert self._control is not None
        r = self._control.run("read -r __c < /proc/1/task/1/children; echo \"relay:$__c\"", timeout=30)
        pids = r.stdout.partition("relay:")[2].split()
        if len(pids) != 1 or not pids[0].isdigit():
            raise SandboxError(f"sandbox {self.name}: no door relay in PID 1's children {pids}", "run appliance init")
        return int(pids[0])

    def scrub(self, *, wipe: bool = True) -> None:
        """Kill every process but PID 1, the shell it runs in, the verdict launcher and the door's relay; with
        `wipe`, also empty every writable place, so the sandbox is as clean as a new one. Raise SandboxError
        when it cannot (then discard the sandbox). In a sandbox that will be copied out it runs in the
        control shell (the agent's shell dies with the rest). A door sandbox's PID 1 is catatonit, which
        reaps orphans too, and ends the container when the relay ends: the relay is spared."""
        spared = self.spared | ({self._relay} if self._relay is not None else set())
        kill = KILL_ALL if not spared else KILL_ALL_BUT.replace("SPARED", " ".join(map(str, sorted(spared))))
        if self._control is not None and not self._control.pid:
            if not self.alive():  # the container is gone: the machine's doing (killed, swept, past its lifetime)
                raise SandboxError(f"sandbox {self.name} is gone: it cannot be scrubbed",
                                   "an infra error: the rollout is excluded from training; check `podman ps -a`")
            raise SandboxNotClean(f"sandbox {self.name}: a process inside killed the shell that scrubs it",
                                  "the sandbox is discarded; what ran there did it")
        r = (self._control or self.shell()).run(kill + ("\n" + WIPE if wipe else ""), timeout=30)
        if "kill: clean" not in r.stdout or (wipe and "wipe: clean" not in r.stdout):
            raise SandboxNotClean(f"sandbox {self.name} could not be cleaned: {(r.stdout + r.stderr).strip()[-300:]}",
                               "the sandbox is discarded; a new one is started")

    def stop(self, *, removed: bool = False) -> None:
        """Remove the container (idempotent); also the door and its socket dir."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for shell in (self._shell, self._control):
                if shell is not None:
                    shell.close()
            if not removed:
                podman(self.settings, "rm", "-f", "-t", "0", "--ignore", self.name, check=False, timeout=120)
        finally:
            with _live_lock:
                _live.pop(self.name, None)
            if self._door is not None:
                self._door.close()
            if self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)
            for fn in self.on_stop:
                fn()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """Copy /workspace back into the host workspace (when one was given and the block ended cleanly),
        then stop; a copy that fails (the sandbox died) raises SandboxError after the stop.

        Whatever is still running is killed first (a door's relay excepted): nothing the agent left changes
        the tree while it is copied, and a fork bomb it left cannot starve the copy (which would look like
        the machine's failure). What will not die raises SandboxNotClean: the agent's doing."""
        try:
            if exc_type is None and self.workspace is not None and not self._stopped:
                self.scrub(wipe=False)
                self.get("/workspace", self.workspace)
        finally:
            self.stop()
