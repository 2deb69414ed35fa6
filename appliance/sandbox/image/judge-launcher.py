"""The verifier's launcher inside a sandbox: the only process whose words the host takes as a verdict.

Started by the host as the top process of its own `podman exec --user 0 --privileged` (one per sandbox),
it first narrows itself to the capabilities KILL, SETUID, SETGID, CHOWN and DAC_READ_SEARCH (bounding,
permitted and effective sets: `confine`); the container grants none, so the agent's uid has none and
cannot gain them (no-new-privileges). No process of the agent's uid may signal it (`kill -STOP`
included), ptrace it, read its memory or open its descriptors; its stdin (the requests, verifiers'
sources in them) and stdout (the verdicts) are pipes only it and the container runtime hold.

Two uids: the verifier is the judge (1001), the code under test the agent (1000), so neither may signal or
ptrace the other. Before each verifier run the workspace becomes the judge's (lchown by `os.fwalk`, never
through a link; owner judge, group agent; the host made it read-only with the agent's permissions copied
to the group: the agent's code reads what the agent could, and changes nothing); after it, what the judge
owns in the workspace, /tmp, /dev/shm and /dev/mqueue goes back to the agent's uid, whose scrub empties
them. CHOWN and DAC_READ_SEARCH (to walk directories made private) are for that alone.

It serves one sandbox: it prints its pid, then reads one JSON request per line on stdin ({"argv", "source",
"timeout_s", "output_limit", "env", "spare", "own"}) and for each forks the verifier, which drops to the
judge's uid and runs `argv` (an execute-only interpreter under /usr/local/libexec/appliance, so the
verifier is not dumpable either: code it runs directly cannot rewrite its exit status, read its memory
or its descriptors). The verifier's source is never in its argv or environment (/proc/PID/cmdline is
readable by every process): it is a sealed memfd on fd 4, which the interpreter's bootstrap (argv) reads
and closes before the source runs. Its stdout/stderr are its own pipes; fd 3 is its score channel: a
datagram socket whose every message carries the sender's pid (SCM_CREDENTIALS, filled in by the kernel),
so only what the verifier's own process writes counts, never what a process it started writes to an
inherited fd 3 (the Python bootstrap also makes fd 3 close-on-exec; a bash verifier cannot).

Fd 5 runs the code under test as the agent (`appliance_check.run_as_agent`): one JSON request per line
({"argv", "stdin", "timeout", "cwd", "env"}), one JSON answer ({"returncode", "stdout", "stderr",
"timed_out"}). The child has a session of its own, uid 1000, no capability, none of fds 3 to 5; when it
exits (or at its limit, bounded by the verifier's) every process of the agent's uid but the spared dies:
its only outputs are data. A verifier that runs workspace code itself runs it as the judge: its author's
decision to trust it; the appliance's families never do.

The launcher kills everything else of the sandbox when the verifier is done, and prints one JSON
verdict: the verifier's exit code or signal as waitpid saw it, whether it ran out of time, the score it
wrote to fd 3, and the (bounded) output, on one line. Only the standard library; no file under
/workspace is read or imported.
"""
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import time

LIBEXEC = "/usr/local/libexec/appliance"
AGENT_UID = 1000  # the image's `agent` user: the code under test
JUDGE_UID = 1001  # the image's `judge` user: the verifier
SCRATCH = ("/workspace", "/tmp", "/dev/shm", "/dev/mqueue")  # the judge's files here go back to the agent
REQUEST_MAX = 16 << 20  # one run_as_agent request (its stdin included)
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
F_ADD_SEALS, F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE = 1033, 1, 2, 4, 8


CAP_CHOWN, CAP_DAC_READ_SEARCH, CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP = 0, 2, 5, 6, 7, 8
PR_CAPBSET_DROP, CAPABILITY_V3 = 24, 0x20080522
KEEP = ((1 << CAP_KILL) | (1 << CAP_SETGID) | (1 << CAP_SETUID) | (1 << CAP_CHOWN)
        | (1 << CAP_DAC_READ_SEARCH))


def confine():
    """Keep only KILL (end what a verifier leaves), SETUID and SETGID (start the verifier as the judge and
    the code under test as the agent), CHOWN and DAC_READ_SEARCH (hand the workspace from one to the other):
    drop the rest from the bounding set (while SETPCAP allows it), then from the permitted and effective sets. True when
    the process holds exactly those afterwards."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in sorted(range(last + 1), key=lambda c: c == CAP_SETPCAP):  # SETPCAP last: it allows the others
        if not KEEP >> cap & 1:
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_V3, 0)
    data = (ctypes.c_uint32 * 6)(KEEP, KEEP, 0, 0, 0, 0)  # (effective, permitted, inheritable) x 2 words
    if libc.capset(header, data) != 0:
        return False
    with open("/proc/self/status") as f:
        caps = {k: int(v, 16) for k, v in (line.split(":\t") for line in f if line.startswith("Cap"))}
    return caps["CapEff"] == caps["CapPrm"] == caps["CapBnd"] == KEEP and caps["CapAmb"] == 0


def dumpable():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # belt and braces: the execute-only binary did it already
    return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)


def source_fd(source):
    """The verifier's source as a sealed memfd (read-only to whoever holds it, never on a file system)."""
    fd = os.memfd_create("verifier", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    data = source.encode()
    while data:
        data = data[os.write(fd, data):]
    fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def child(argv, env, out_w, err_w, score_w, src, agent_w):
    try:
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(score_w, 3)
        os.dup2(src, 4)  # (dup2 clears close-on-exec: the interpreter's bootstrap reads it, then closes it)
        os.dup2(agent_w, 5)  # run_as_agent's channel
        os.closerange(6, 1 << 16)
        os.chdir("/workspace")
        # Out of root for good: the verifier is the judge's uid with no capability, so nothing it runs may
        # signal this launcher, and nothing of the agent's uid may signal it.
        os.setgroups([])
        os.setresgid(JUDGE_UID, JUDGE_UID, JUDGE_UID)
        os.setresuid(JUDGE_UID, JUDGE_UID, JUDGE_UID)
        os.execve(argv[0], argv, env)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the launcher
        os.write(2, f"judge: cannot start the verifier: {e}\n".encode())
    os._exit(127)


class Score:
    """The verifier's fd 3: a datagram socket pair; what arrives counts only when the verifier's own process
    sent it (its pid, as the kernel attests it)."""

    def __init__(self):
        self.sock, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.setblocking(False)
        self.peer = peer.detach()  # the verifier's fd 3
        self.text = b""

    def take(self, pid):
        """Every message waiting; the verifier's kept (up to 4 KiB), anyone else's dropped."""
        while True:
            try:
                data, anc, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(struct.calcsize("3i")))
            except OSError:  # (BlockingIOError: nothing more waiting)
                return
            sender = next((struct.unpack("3i", d[:12])[0] for level, kind, d in anc
                           if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS), None)
            if sender == pid and len(self.text) < 4096:
                self.text += data


def collect(pid, streams, limit, deadline, score, agent):
    """Read the pipes and the score channel, and answer run_as_agent requests, until the verifier exits (or
    the deadline); returns (status, timed_out)."""
    status, timed_out = None, False
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            status = os.waitpid(pid, 0)[1]
            break
        watched = [*streams, score.sock] + ([agent.sock] if agent.sock is not None else [])
        ready, _, _ = select.select(watched, [], [], min(left, 0.05))
        for fd in ready:
            if fd is score.sock:
                score.take(pid)
            elif fd is agent.sock:
                agent.serve(deadline)
            elif fd in streams:
                _read(fd, streams, limit)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
    score.take(pid)  # what it wrote before it exited; nothing after counts (its pid is free again)
    return status, timed_out


class Agent:
    """The verifier's fd 5: runs the code under test as the agent's uid, one request at a time (module doc)."""

    def __init__(self, limit, spare):
        self.sock, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.peer = peer.detach()  # the verifier's fd 5
        self.limit, self.spare, self.buffer = limit, spare, b""

    def serve(self, deadline):
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data or len(self.buffer) + len(data) > REQUEST_MAX:
            self.close()  # the verifier closed it (or sent more than a request may hold): no more calls
            return
        self.buffer += data
        while self.sock is not None and b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            try:
                req = json.loads(line)
                reply = self.run([str(a) for a in req["argv"]], str(req.get("stdin") or "").encode(),
                                 min(float(req.get("timeout", 20)), deadline - time.monotonic()),
                                 str(req.get("cwd") or "/workspace"), req.get("env"))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                reply = {"error": f"bad run_as_agent request: {e}"[:300]}
            try:
                self.sock.settimeout(max(0.1, deadline - time.monotonic()))
                self.sock.sendall(json.dumps(reply).encode() + b"\n")
                self.sock.settimeout(None)
            except OSError:
                self.close()

    def run(self, argv, stdin, timeout, cwd, env):
        if not argv:
            return {"error": "run_as_agent: an empty argv"}
        env = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else dict(AGENT_ENV)
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            agent_child(argv, env, cwd, in_r, out_w, err_w)
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        os.set_blocking(in_w, False)
        streams = {out_r: [b"", 0], err_r: [b"", 0]}
        bufs = dict(streams)
        writer = [in_w, stdin]
        status, timed_out = None, False
        end = time.monotonic() + max(0.0, timeout)
        while status is None:
            left = end - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, writable, _ = select.select(list(streams), [writer[0]] if writer[0] is not None else [], [],
                                               min(left, 0.05))
            for fd in ready:
                _read(fd, streams, self.limit)
            if writable:
                _feed(writer)
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
        if writer[0] is not None:
            os.close(writer[0])
        # The call ends here for everything of the agent's uid (what its code left running holds no pipe open
        # and cannot act between two calls): all of it but the spared (the host's driving shell).
        kill_uid(AGENT_UID, self.spare)
        if status is None:
            status = os.waitpid(pid, 0)[1]
        drain(streams, self.limit)
        for fd in list(streams):
            os.close(fd)
        out, err = (bufs[fd][0].decode(errors="replace") for fd in (out_r, err_r))
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        return {"returncode": code, "stdout": out, "stderr": err, "timed_out": timed_out}

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


# The code under test's environment when the verifier names none: the agent's own.
AGENT_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent", "USER": "agent", "LANG": "C.UTF-8",
             "TERM": "dumb", "PYTHONDONTWRITEBYTECODE": "1"}


def agent_child(argv, env, cwd, in_r, out_w, err_w):
    try:
        os.setsid()  # its own process group and session, away from the verifier's
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)  # no score channel, no source, no fd 5
        os.setgroups([])
        os.setresgid(AGENT_UID, AGENT_UID, AGENT_UID)
        os.setresuid(AGENT_UID, AGENT_UID, AGENT_UID)  # (from root to non-root: every capability is gone)
        os.chdir(cwd)  # as the agent: a directory it may not enter is its own failure
        os.execvpe(argv[0], argv, env)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the launcher
        os.write(2, f"run_as_agent: cannot run {argv[0]!r}: {e}\n".encode())
    os._exit(127)


def _feed(writer):
    fd, data = writer
    try:
        n = os.write(fd, data[:1 << 16]) if data else 0
    except BlockingIOError:
        return
    except OSError:  # it closed its stdin: what it did not read is its business
        n, data = len(data), b""
    writer[1] = data[n:]
    if not writer[1]:
        os.close(fd)
        writer[0] = None


def kill_uid(uid, spare):
    """SIGKILL every process whose real uid is `uid` but `spare`, round after round until none is left."""
    for _ in range(200):
        alive = 0
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) in spare:
                continue
            try:
                with open(f"/proc/{p}/status") as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
                if int(status["Uid"].split()[0]) != uid or status["State"].split()[0] == "Z":
                    continue
                os.kill(int(p), signal.SIGKILL)
                alive += 1
            except (OSError, KeyError, ValueError, IndexError):
                pass
        if not alive:
            return
        time.sleep(0.005)


def chown_tree(top, uid, gid, only=None):
    """lchown `top` and everything below it (never through a link; one file system) to uid:gid; with `only`,
    just what that uid owns. What cannot be reached is left as it is."""
    def one(name, dir_fd=None):
        try:
            if only is None or os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_uid == only:
                os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            pass
    one(top)
    try:
        dev = os.stat(top, follow_symlinks=False).st_dev
        for _, dirs, files, fd in os.fwalk(top, follow_symlinks=False):
            if os.fstat(fd).st_dev != dev:
                dirs.clear()
                continue
            for name in dirs + files:
                one(name, fd)
    except OSError:
        pass


def _read(fd, streams, limit):
    try:
        data = os.read(fd, 1 << 16)
    except OSError:
        data = b""
    if not data:
        streams.pop(fd)
        os.close(fd)
        return
    buf = streams[fd]
    room = limit - len(buf[0])
    buf[0] += data[:max(room, 0)]
    buf[1] += max(0, len(data) - max(room, 0))


def kill_others(spare):
    """SIGKILL every other process of the sandbox, round after round until none is left (a process
    forked between two rounds is caught by the next; the pids limit bounds how many there can be)."""
    for _ in range(200):
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in spare]
        alive = 0
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                alive += 1
            except OSError:
                pass
        if not alive:
            return
        time.sleep(0.005)


def drain(streams, limit):
    """After everything else of this uid is dead, the pipes reach EOF; read what is left."""
    deadline = time.monotonic() + 5
    while streams and time.monotonic() < deadline:
        ready, _, _ = select.select(list(streams), [], [], 0.1)
        for fd in ready:
            _read(fd, streams, limit)


def judge(req):
    """One verifier run; the verdict as a dict."""
    limit = int(req["output_limit"])
    argv = [str(a) for a in req["argv"]]
    if not argv or os.path.dirname(argv[0]) != LIBEXEC:  # only the execute-only interpreters judge
        return {"error": f"the verifier's interpreter {argv[:1]} is not under {LIBEXEC}"}
    spare = {1, os.getpid(), *map(int, req.get("spare", []))}
    # The judge's workspace (and the host's extra paths: a question's answer file), which the agent's uid may
    # read as the agent could, and change in no way (module doc).
    for path in ("/workspace", *[str(p) for p in req.get("own", [])]):
        chown_tree(path, JUDGE_UID, AGENT_UID)
    (out_r, out_w), (err_r, err_w), score = os.pipe(), os.pipe(), Score()
    agent = Agent(limit, spare)
    src = source_fd(req["source"])
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child(argv, req["env"], out_w, err_w, score.peer, src, agent.peer)
    for fd in (out_w, err_w, score.peer, src, agent.peer):
        os.close(fd)
    streams = {out_r: [b"", 0], err_r: [b"", 0]}
    names = {out_r: "stdout", err_r: "stderr"}
    bufs = dict(streams)
    status, timed_out = collect(pid, streams, limit, started + float(req["timeout_s"]), score, agent)
    score.sock.close()
    agent.close()
    # Whatever the verifier or the code it ran left behind (a daemon holding a pipe open) dies here, all
    # but this process, PID 1 and the host's driving shell (`spare`: the host scrubs with it next).
    kill_others(spare)
    drain(streams, limit)
    for fd in list(streams):
        os.close(fd)
    for path in SCRATCH:  # back to the agent's uid, whose scrub empties them
        chown_tree(path, AGENT_UID, AGENT_UID, only=JUDGE_UID)
    text = {names[fd]: buf[0].decode(errors="replace") for fd, buf in bufs.items()}
    return dict(
        exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        timed_out=timed_out, duration_s=round(time.monotonic() - started, 4),
        stdout=text["stdout"], stderr=text["stderr"], score_channel=score.text.decode(errors="replace")[:4096],
        dropped=bufs[out_r][1] + bufs[err_r][1], dumpable=0)


def main():
    # A session: the first line says this process's pid (the host's scrubs spare it), then one JSON
    # request per line in, one JSON verdict per line out, until stdin closes.
    if dumpable() != 0:
        # The image lost its execute-only interpreters: refuse rather than give a verdict that can be forged.
        print(json.dumps({"error": "the judge is dumpable (is /usr/local/libexec/appliance/judge-python3 mode 0711?)"}))
        return
    if os.geteuid() != 0 or not confine():
        # As the agent's uid it could be stopped or killed by the code the verifier runs.
        print(json.dumps({"error": "the judge must start as privileged root (podman exec --user 0 --privileged) "
                                   "to leave the agent's reach, and narrow itself to KILL, SETUID, SETGID, CHOWN "
                                   "and DAC_READ_SEARCH"}))
        return
    out = sys.stdout
    out.write(f"{os.getpid()}\n")
    out.flush()
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(judge(json.loads(line))) + "\n")
            out.flush()


main()
