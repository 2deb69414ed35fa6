"""No sandbox outlives its owner: sweeps, SIGTERM, SIGKILL + restart, the --timeout dead-man switch, the pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import Settings
from appliance.errors import SandboxError
from appliance.sandbox import LABEL, Sandbox, SandboxPool, check_podman, sweep
from appliance.sandbox.podman import podman

pytestmark = pytest.mark.slow

OWNER = """
import json, sys, time
from appliance.config import Settings
from appliance.errors import SandboxError
from appliance.sandbox import Sandbox
settings = Settings.model_validate_json(sys.argv[1])
sb = Sandbox.start(settings)
print(sb.name, flush=True)
time.sleep(600)
"""


def labelled(settings: Settings) -> list[str]:
    out = podman(settings, "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
    return out.stdout.decode().split()


def start_owner(settings: Settings) -> tuple[subprocess.Popen[str], str]:
    # without the caller's APPLIANCE_*: the environment outranks the JSON's values in Settings, so a run of the
    # suite with APPLIANCE_HOME set started the owner's sandbox in that home's store, not the session's
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    proc = subprocess.Popen([sys.executable, "-c", OWNER, settings.model_dump_json()], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout
    name = proc.stdout.readline().strip()
    assert name in labelled(settings)
    return proc, name


def test_sigkill_of_the_owner_then_restart_leaves_nothing(sandbox_settings: Settings) -> None:
    proc, name = start_owner(sandbox_settings)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert name in labelled(sandbox_settings)  # nothing could clean up ...
    SandboxPool(sandbox_settings)  # ... until the next start sweeps the dead owner's leftovers
    assert name not in labelled(sandbox_settings)
    assert not (sandbox_settings.home / "sandboxes" / name).exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_of_the_owner_removes_its_sandboxes(sandbox_settings: Settings, sig: int) -> None:
    proc, name = start_owner(sandbox_settings)
    proc.send_signal(sig)
    assert proc.wait(60) == -sig  # the signal's own exit status, after the cleanup
    assert name not in labelled(sandbox_settings)
    assert not (sandbox_settings.home / "sandboxes" / name).exists()


def test_lifetime_kills_and_removes_a_forgotten_sandbox(sandbox_settings: Settings) -> None:
    short = sandbox_settings.model_copy(deep=True)
    short.sandbox.lifetime_s = 10
    sb = Sandbox.start(short)
    try:
        deadline = time.monotonic() + 60
        while sb.name in labelled(short) and time.monotonic() < deadline:
            time.sleep(1)
        assert sb.name not in labelled(short)
    finally:
        sb.stop()


def test_shutdown_sweep_removes_everything(sandbox_settings: Settings) -> None:
    boxes = [Sandbox.start(sandbox_settings) for _ in range(2)]
    assert sweep(sandbox_settings) >= 2
    assert labelled(sandbox_settings) == []
    for sb in boxes:
        sb.stop()  # idempotent after a sweep


def test_pool_caps_concurrency(sandbox_settings: Settings) -> None:
    pool = SandboxPool(sandbox_settings, max_concurrent=2)
    alive, peak, lock = [0], [0], threading.Lock()

    def work() -> None:
        with pool.start() as sb:
            with lock:
                alive[0] += 1
                peak[0] = max(peak[0], alive[0])
            sb.exec("sleep 0.5")
            with lock:
                alive[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2
    assert labelled(sandbox_settings) == []


def test_check_podman_explains_each_failure(sandbox_settings: Settings, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ok, detail, hint = check_podman(sandbox_settings)
    assert ok and "hardened sandbox" in detail and hint == ""
    missing = sandbox_settings.model_copy(deep=True)
    missing.sandbox.image = "appliance-nothing-here"
    ok, detail, hint = check_podman(missing)
    assert not ok and "not built" in detail and "appliance init" in hint
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, detail, hint = check_podman(sandbox_settings)
    assert not ok and "not installed" in detail and "apt-get install" in hint


def test_cli_sandbox_exec(sandbox_settings: Settings, tmp_path: Path) -> None:
    s = sandbox_settings
    env = {"APPLIANCE_HOME": str(s.home), "APPLIANCE_PODMAN__GRAPHROOT": str(s.podman_graphroot),
           "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps([str(p) for p in s.podman.additional_image_stores])}
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "in.txt").write_text("a\nb\n")
    r = CliRunner().invoke(main, ["sandbox", "exec", "--json", "--workspace", str(tmp_path / "ws"), "--",
                                  "wc -l < in.txt; echo oops >&2; exit 3"], env=env)
    data = json.loads(r.stdout)
    assert r.exit_code == 3 and data["exit_code"] == 3
    assert data["stdout"] == "2\n" and data["stderr"] == "oops\n" and data["duration_s"] > 0
    r = CliRunner().invoke(main, ["sandbox", "exec", "--workspace", str(tmp_path / "nope"), "--", "true"], env=env)
    assert r.exit_code == 1 and "does not exist" in r.output and "Traceback" not in r.output
    assert labelled(s) == []
    # the workspace is copied in and back (no bind mount): host files stay the invoking user's
    assert os.stat(tmp_path / "ws" / "in.txt").st_uid == os.geteuid()
    r = CliRunner().invoke(main, ["sandbox", "exec", "--workspace", str(tmp_path / "ws"), "--", "echo new > out.txt"],
                           env=env)
    assert r.exit_code == 0 and (tmp_path / "ws" / "out.txt").read_text() == "new\n"


def test_a_broken_runtime_is_retried_then_explained(sandbox_settings: Settings, tmp_path: Path) -> None:
    broken = sandbox_settings.model_copy(deep=True)
    broken.home = tmp_path / "home"  # its own podman config dir, same storage root
    broken.podman.graphroot = sandbox_settings.podman_graphroot
    broken.podman.runtime = "no-such-runtime"
    with pytest.raises(SandboxError) as e:
        Sandbox.start(broken)
    assert e.value.message.count("no-such-runtime") == broken.sandbox.start_retries + 1  # every attempt recorded
    assert "appliance doctor" in e.value.hint
    ok, detail, hint = check_podman(broken)
    assert not ok and "no-such-runtime" in detail and "podman.runtime" in hint
    assert labelled(sandbox_settings) == []
