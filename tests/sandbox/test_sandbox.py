"""Each limit of a hardened sandbox, with real Podman in the session's isolated storage root."""

from __future__ import annotations

import subprocess
import tracemalloc
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.errors import SandboxError
from appliance.sandbox import LABEL, Sandbox
from appliance.sandbox.podman import podman

pytestmark = pytest.mark.slow


def labelled(settings: Settings) -> list[str]:
    out = podman(settings, "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
    return out.stdout.decode().split()


@pytest.fixture
def sb(sandbox_settings: Settings) -> Sandbox:
    with Sandbox.start(sandbox_settings) as box:
        yield box
    assert box.name not in labelled(sandbox_settings)


def test_runs_as_the_agent_in_the_workspace(sb: Sandbox) -> None:
    r = sb.exec("id -u; pwd; echo $HOME; python3 -c 'print(6*7)'; git --version")
    assert r.exit_code == 0 and not r.timed_out
    assert r.stdout.split("\n")[:4] == ["1000", "/workspace", "/home/agent", "42"]


def test_egress_fails(sb: Sandbox) -> None:
    r = sb.exec("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=5)'")
    assert r.exit_code != 0 and "Network is unreachable" in r.stderr
    r = sb.exec("curl -sS --max-time 5 http://1.1.1.1/")
    assert r.exit_code == 7 and "Failed to connect" in r.stderr
    r = sb.exec("cat /proc/net/dev")
    assert "lo:" in r.stdout and "eth0" not in r.stdout  # only the loopback interface exists


def test_writes_outside_the_workspace_fail(sb: Sandbox) -> None:
    for path in ("/etc/passwd", "/usr/bin/x", "/x", "/var/x", "/door/x"):
        r = sb.exec(f"echo pwned > {path}")
        assert r.exit_code != 0, path
    r = sb.exec("echo ok > /workspace/out && echo t > /tmp/t && echo h > ~/h && cat /workspace/out /tmp/t ~/h")
    assert r.stdout == "ok\nt\nh\n"
    assert sb.get("/workspace/out", sb.settings.home / "out").read_text() == "ok\n"
    r = sb.exec("sudo id; su -c id; grep Cap /proc/self/status | sort -u")
    assert "CapEff:\t0000000000000000" in r.stdout and "uid=0" not in r.stdout


def test_fork_bomb_is_contained(sb: Sandbox, sandbox_settings: Settings) -> None:
    r = sb.exec(":(){ :|:& };: ; sleep 2; ps -e --no-headers | wc -l", timeout=10)
    assert r.stdout.strip() == "" or int(r.stdout) <= sandbox_settings.sandbox.pids_limit
    after = sb.exec("ps -e --no-headers | wc -l")
    assert after.exit_code == 0 and int(after.stdout) < 10  # the bomb's group died with its time limit
    assert subprocess.run(["true"]).returncode == 0  # the host still forks
    pids = podman(sandbox_settings, "inspect", sb.name, "--format", "{{.HostConfig.PidsLimit}}").stdout.decode()
    assert int(pids) == sandbox_settings.sandbox.pids_limit


def test_a_fork_bomb_left_running_does_not_starve_the_copy_out(sandbox_settings: Settings, tmp_path: Path) -> None:
    # An agent that leaves a bomb outside its command's process group (setsid) must still have its workspace
    # judged: the copy out used to fail to fork and was recorded as the machine's failure (issue 27).
    ws = tmp_path / "ws"
    ws.mkdir()
    with Sandbox.start(sandbox_settings, workspace=ws) as box:
        r = box.shell().run("echo mine > out.txt; setsid bash -c ':(){ :|:& };:' >/dev/null 2>&1 & sleep 2; echo ok",
                            timeout=20)
        assert "ok" in r.stdout or r.timed_out
    assert (ws / "out.txt").read_text() == "mine\n"
    assert box.name not in labelled(sandbox_settings)


def test_memory_bomb_is_killed_not_the_host(sb: Sandbox) -> None:
    r = sb.exec("python3 -c 'x = bytearray(2 * 1024**3); print(len(x))'", timeout=30)
    assert r.exit_code == 137 and not r.timed_out and "2147483648" not in r.stdout
    r = sb.exec("head -c 1G /dev/zero > /tmp/fill; echo $?", timeout=30)  # tmpfs pages count too
    assert r.exit_code != 0 or r.stdout.strip() != "0"
    assert sb.exec("echo alive").stdout == "alive\n"


def test_a_command_past_its_time_limit_is_killed(sb: Sandbox) -> None:
    r = sb.exec("echo started; sleep 60 | cat; echo never", timeout=1)
    assert r.timed_out and r.exit_code == 137
    assert r.stdout == "started\n" and r.stderr == ""  # no job-control noise from the wrapper
    assert "sleep 60" not in sb.exec("ps -eo args").stdout


def test_a_killed_sandbox_says_it_is_gone(sb: Sandbox) -> None:
    """Issue 31: a container killed under a rollout (OOM of the whole sandbox, an operator, a crash) is named as
    gone, the machine's failure, whether the shell was running or not yet started."""
    podman(sb.settings, "kill", "-s", "KILL", sb.name, check=False)
    with pytest.raises(SandboxError) as gone:
        sb.shell().run("echo hello")
    assert f"sandbox {sb.name}" in gone.value.message and ("is gone" in gone.value.message
                                                           or "died while running" in gone.value.message)


def test_persistent_shell_keeps_state_and_survives_timeouts(sb: Sandbox) -> None:
    sh = sb.shell()
    assert sh.run("cd /tmp && X=41").exit_code == 0
    r = sh.run("echo $((X+1)); pwd; echo -n e >&2; false")
    assert (r.stdout, r.stderr, r.exit_code) == ("42\n/tmp\n", "e", 1)
    assert sh.run("if then").exit_code == 2  # a syntax error does not desynchronise the session
    assert sh.run("cat").exit_code == 0  # stdin is /dev/null, not the protocol
    r = sh.run("sleep 60 & sleep 60", timeout=1)
    assert r.timed_out and sh.restarts == 1
    assert sh.run("pwd").stdout == "/workspace\n"  # a fresh session
    assert "sleep 60" not in sb.exec("ps -eo args").stdout
    assert sh.run("exit 3").exit_code == 3
    assert sh.run("echo back").stdout == "back\n"


def test_output_is_capped_and_memory_stays_bounded(sb: Sandbox, sandbox_settings: Settings) -> None:
    cap = sandbox_settings.sandbox.output_limit_bytes
    tracemalloc.start()
    r = sb.exec("head -c 100000000 /dev/zero | tr '\\0' x; head -c 5000000 /dev/zero >&2", timeout=120)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert r.exit_code == 0 and r.truncated
    assert r.stdout.startswith("x" * 1000) and "output truncated, 99000000 more bytes dropped" in r.stdout
    assert len(r.stdout) < cap + 200 and len(r.stderr) < cap + 200
    assert peak < 20 * cap
    r = sb.shell().run("head -c 100000000 /dev/zero | tr '\\0' y; echo tail", timeout=120)
    assert r.truncated and "more bytes dropped" in r.stdout and r.exit_code == 0
    assert sb.shell().run("echo next").stdout == "next\n"


def test_code_in_the_sandbox_cannot_write_commands_into_the_driving_shell(sb: Sandbox) -> None:
    # Issue 47: the shell reads the appliance's commands from a pipe; another process of the same uid (a
    # task's setup) opened it through /proc/<shell>/fd/10 (bash's saved stdin while a command runs) and
    # queued its own, e.g. functions that made the next validations in a reused sandbox decide wrongly
    sh = sb.shell()
    sh.run("bash -c 'for f in /proc/'$$'/fd/*; do case $f in */1|*/2) ;; *) "
           "printf \"touch /tmp/injected\\n\" > $f;; esac; done' 2>/dev/null; echo done")
    sh.run("true")
    assert sh.run("test -e /tmp/injected").exit_code != 0
    assert sh.run("echo ok").stdout == "ok\n"  # and the shell still works


def test_a_poisoned_agent_shell_cannot_fake_the_scrub_before_the_copy_out(sandbox_settings: Settings,
                                                                         tmp_path: Path) -> None:
    # the agent's commands run in the sandbox's persistent shell, where they may redefine `kill` and freeze the
    # scrub's own variables: the scrub before the copy out, run in that shell, reported clean having killed
    # nothing (so what the agent left could change the tree during the copy, or starve it of pids)
    with Sandbox.start(sandbox_settings, workspace=tmp_path) as box:
        box.shell().run("setsid sleep 1000 & kill() { :; }; readonly __left=")
        box.scrub(wipe=False)
        assert "sleep 1000" not in box.exec("ps -eo args").stdout


def test_put_and_get_files_and_trees(sb: Sandbox, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)) * 100)
    sb.put(tree, "/workspace/proj")
    sb.put(b"raw bytes", "/tmp/deep/r.txt")
    r = sb.exec("cat /workspace/proj/a.txt /tmp/deep/r.txt; stat -c %u /workspace/proj/sub/b.bin")
    assert r.stdout == "araw bytes1000\n"
    sb.exec("ln -s /etc/shadow /workspace/proj/evil; ln -s ../../../../etc /workspace/proj/up")
    got = sb.get("/workspace/proj", tmp_path / "back")
    assert (got / "sub" / "b.bin").read_bytes() == (tree / "sub" / "b.bin").read_bytes()
    assert not (got / "evil").exists() and not (got / "evil").is_symlink()  # links out of the tree are dropped
    assert not (got / "up").is_symlink()
    assert sb.get("/tmp/deep/r.txt", tmp_path / "r.txt").read_text() == "raw bytes"
    with pytest.raises(SandboxError, match="get /nope"):
        sb.get("/nope", tmp_path / "nope")
    with pytest.raises(SandboxError, match="writable"):
        sb.put(b"x", "/etc/x")


def test_verifier_files_are_never_visible_to_the_agent(sandbox_settings: Settings, tmp_path: Path) -> None:
    """The verifier stays on the host and runs afterwards in a fresh sandbox over a copy of the workspace."""
    verifier = tmp_path / "verifier"
    verifier.mkdir()
    (verifier / "check.sh").write_text("grep -q VERIFIER_SECRET_42 /dev/null; test \"$(cat /workspace/answer)\" = 7\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    with Sandbox.start(sandbox_settings, workspace=ws) as agent:
        r = agent.exec(f"echo 7 > answer; ls {verifier} 2>&1; grep -rl VERIFIER_SECRET_42 / --exclude-dir=proc "
                       "--exclude-dir=sys 2>/dev/null; find / -name check.sh 2>/dev/null", timeout=60)
        assert "check.sh" not in r.stdout and "No such file" in r.stdout
        workspace_copy = agent.get("/workspace", tmp_path / "copy")
    with Sandbox.start(sandbox_settings) as judge:
        judge.put(workspace_copy, "/workspace")
        judge.put(verifier, "/tmp/verifier")
        assert judge.exec("bash /tmp/verifier/check.sh").exit_code == 0


def test_no_container_left_after_an_exception(sandbox_settings: Settings) -> None:
    with pytest.raises(RuntimeError), Sandbox.start(sandbox_settings) as box:
        raise RuntimeError("boom")
    assert box.name not in labelled(sandbox_settings)


def test_bad_input_gives_clear_errors_and_no_leak(sandbox_settings: Settings, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    before = labelled(sandbox_settings)
    with pytest.raises(SandboxError, match="not built") as e:
        Sandbox.start(sandbox_settings, image="appliance-sandbox:missing")
    assert "appliance init" in e.value.hint
    with pytest.raises(SandboxError, match="does not exist"):
        Sandbox.start(sandbox_settings, workspace=tmp_path / "absent")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="podman is not installed") as e:
        Sandbox.start(sandbox_settings)
    assert "scripts/setup" in e.value.hint
    monkeypatch.undo()
    assert labelled(sandbox_settings) == before


def test_no_user_namespaces_and_a_bounded_workspace(sb: Sandbox, sandbox_settings: Settings) -> None:
    """Issue 14: the seccomp profile refuses new user namespaces; /workspace is a capped tmpfs."""
    r = sb.exec("unshare -r id; unshare -U true; python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                "print(libc.unshare(0x10000000), ctypes.get_errno())'", timeout=30)
    assert "uid=0" not in r.stdout and r.stderr.count("Operation not permitted") == 2, r.stderr
    assert r.stdout.split() == ["-1", "1"]  # unshare(CLONE_NEWUSER): EPERM
    r = sb.exec("python3 -c 'import threading; t = threading.Thread(target=print, args=(\"threads ok\",)); t.start()'")
    assert r.stdout == "threads ok\n"  # clone3 answers ENOSYS, glibc falls back to clone
    r = sb.exec("fallocate -l 20G /workspace/big; df -B1 --output=fstype,size /workspace | tail -1")
    assert r.exit_code == 0 and r.stdout.split()[0] == "tmpfs"
    from appliance.sandbox.sandbox import workspace_bytes

    assert int(r.stdout.split()[1]) == workspace_bytes(sandbox_settings)


def test_scrub_leaves_a_sandbox_as_clean_as_a_new_one(sb: Sandbox) -> None:
    made = sb.exec("(setsid bash -c 'exec -a sleep sleep 1000' &); (exec -a 'sleep infinity' sleep 1000 &); "
            "echo x > /dev/shm/m; echo x > /tmp/m; echo x > ~/.m; mkdir -p /workspace/d; chmod 000 /workspace/d; "
            "ipcmk -Q >/dev/null; "
            "python3 -c 'import ctypes; ctypes.CDLL(\"librt.so.1\").mq_open(b\"/q\", 0o102, 0o600, None)'; "
            "ls /dev/mqueue", timeout=10)
    assert made.stdout.split() == ["q"], made  # a POSIX message queue exists
    sh = sb.shell()
    sh.run("(exec -a sleep sleep 1000 &)")
    sb.scrub()
    r = sh.run("for d in /proc/[0-9]*; do printf '%s ' ${d#/proc/}; done; echo / $$")  # builtins: no new process
    pids, shell = r.stdout.split(" / ")
    assert sorted(pids.split()) == sorted(["1", shell.strip()]), r.stdout  # the reaper and the shell
    r = sh.run("ls -A /workspace /tmp ~ /dev/shm /dev/mqueue; ipcs -q | grep -c 0x")
    lines = r.stdout.split()
    assert "m" not in lines and ".m" not in lines and "d" not in lines and "q" not in lines and lines[-1] == "0", \
        r.stdout


def test_doctor_reports_the_isolation_mechanism(sandbox_settings: Settings) -> None:
    from appliance.doctor import check_isolation

    c = check_isolation(sandbox_settings)
    assert c.ok, c.detail
    assert "tmpfs" in c.detail and "MiB" in c.detail and "user namespaces refused" in c.detail
