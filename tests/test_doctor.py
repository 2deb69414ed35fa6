import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.doctor import (
    check_container_host,
    check_data_dir,
    check_gpus,
    check_model,
    check_podman,
    run_checks,
)

REPO = Path(__file__).resolve().parents[1]
APPLIANCE = REPO / ".venv" / "bin" / "appliance"


def test_podman_missing_says_how_to_install(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman here
    c = check_podman(settings)
    assert not c.ok and c.required
    assert "not installed" in c.detail and "scripts/setup" in c.hint


def test_missing_model_points_to_init(settings: Settings) -> None:
    c = check_model(settings)
    assert not c.ok and "appliance init" in c.hint


def test_truncated_weights_are_caught(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes((10_000).to_bytes(8, "little") + b'{"a"')
    settings.engine.model = folder
    c = check_model(settings)
    assert not c.ok and "does not load" in c.detail


def test_unwritable_data_dir(settings: Settings, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    settings.home = blocker / "home"
    c = check_data_dir(settings)
    assert not c.ok and "APPLIANCE_HOME" in c.hint


def test_gpu_profile_requires_a_gpu(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert check_gpus(settings).ok  # cpu profile: a warning at most
    settings.profile = "gpu"
    c = check_gpus(settings)
    assert not c.ok and c.required and "cpu" in c.hint
    # trying the gpu image on a machine without one (doctor --no-gpu): absent, not failed
    [c] = run_checks(settings, [check_gpus], gpu_absent_ok=True)
    assert not c.ok and not c.required and c.detail.startswith("absent: no NVIDIA GPU")


def test_a_crashing_check_is_a_failed_check(settings: Settings) -> None:
    def check_boom(_: Settings):
        raise RuntimeError("boom")

    [c] = run_checks(settings, [check_boom])
    assert c.name == "boom" and not c.ok and "boom" in c.detail


def test_doctor_cli_fails_with_hints_when_not_set_up(tmp_path: Path) -> None:
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path / "empty")}
    out = subprocess.run([str(APPLIANCE), "doctor", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 1
    report = json.loads(out.stdout)
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert "model" in failed and failed["model"]["hint"]
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_doctor_passes_on_the_set_up_machine() -> None:
    """scripts/setup prepared the default APPLIANCE_HOME; doctor must then say ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    out = subprocess.run([str(APPLIANCE), "doctor"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout


def test_small_shared_memory_names_the_container_flag(tmp_path: Path, settings: Settings,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from appliance.doctor import check_shared_memory

    assert check_shared_memory(settings).ok  # this machine's /dev/shm
    assert not check_shared_memory(settings, tmp_path / "missing").ok
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(64 * 2**20, 0, 62 * 2**20))
    c = check_shared_memory(settings, tmp_path)  # podman's default /dev/shm, as vLLM found it
    assert not c.ok and "62 MB free" in c.detail and "--shm-size" in c.hint


# --- an unprivileged container host, from fixture trees (never the live machine) -------------------

FULL_CAPS = "000001fffeffffff"  # this CI machine: everything but CAP_SYS_RESOURCE
DOCKER_DEFAULT_CAPS = "00000000a80425fb"  # Docker's and Kubernetes' default set: no CAP_SYS_ADMIN
ROOT_EXT4 = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
ROOT_OVERLAY = ("700 650 0:88 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/AB:"
                "/var/lib/docker/overlay2/l/CD,upperdir=/var/lib/docker/overlay2/x/diff\n")
CGROUP_RW = "31 27 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
CGROUP_RO = "712 700 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n"


def host_tree(root: Path, *, caps: str, mounts: str, cgroup: str = "0::/\n", files: tuple[str, ...] = (),
              environ: str = "") -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/1").mkdir(parents=True)
    (root / "proc/self/status").write_text(f"Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{caps}\n")
    (root / "proc/self/mountinfo").write_text(mounts)
    (root / "proc/1/cgroup").write_text(cgroup)
    (root / "proc/1/environ").write_text(environ)
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("")
    return root


def namespaces_work() -> None:
    return None


def test_a_plain_host_or_vm_is_no_container(settings: Settings, tmp_path: Path) -> None:
    root = host_tree(tmp_path, caps=FULL_CAPS, mounts=ROOT_EXT4 + CGROUP_RW, cgroup="12:pids:/user.slice\n0::/\n")
    c = check_container_host(settings, root, environ={}, probe=namespaces_work)
    assert c.ok and "not inside a container" in c.detail


def test_a_privileged_container_like_this_machine_passes(settings: Settings, tmp_path: Path) -> None:
    # the CI machines: /.dockerenv, all capabilities but CAP_SYS_RESOURCE, rw cgroups; nested Podman works
    root = host_tree(tmp_path, caps=FULL_CAPS, mounts=ROOT_EXT4 + CGROUP_RW, cgroup="9:name=systemd:/\n0::/\n",
                     files=(".dockerenv",))
    c = check_container_host(settings, root, environ={}, probe=namespaces_work)
    assert c.ok and "docker" in c.detail and "privileges" in c.detail


def test_the_appliance_container_started_privileged_passes(settings: Settings, tmp_path: Path) -> None:
    root = host_tree(tmp_path, caps=FULL_CAPS, mounts=ROOT_EXT4 + CGROUP_RW, files=("run/.containerenv",),
                     environ="container=podman\0TERM=xterm\0")
    c = check_container_host(settings, root, environ={}, probe=namespaces_work)
    assert c.ok and "podman" in c.detail


def test_an_unprivileged_docker_container_is_named_with_the_fix(settings: Settings, tmp_path: Path) -> None:
    root = host_tree(tmp_path, caps=DOCKER_DEFAULT_CAPS, mounts=ROOT_OVERLAY + CGROUP_RO, files=(".dockerenv",))
    c = check_container_host(settings, root, environ={}, probe=namespaces_work)
    assert not c.ok and c.required
    assert "unprivileged docker container" in c.detail
    assert "no CAP_SYS_ADMIN (CapEff 00000000a80425fb)" in c.detail and "read-only" in c.detail
    assert "--privileged" in c.hint and "scripts/container run" in c.hint and "VM" in c.hint


def test_a_kubernetes_pod_is_found_by_its_cgroup_and_environment(settings: Settings, tmp_path: Path) -> None:
    root = host_tree(tmp_path, caps=DOCKER_DEFAULT_CAPS, mounts=ROOT_EXT4,
                     cgroup="0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope\n")
    c = check_container_host(settings, root, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, probe=namespaces_work)
    assert not c.ok and "kubernetes" in c.detail and "KUBERNETES_SERVICE_HOST" in c.detail


def test_namespaces_that_cannot_be_created_fail_even_with_the_capability(settings: Settings, tmp_path: Path) -> None:
    # e.g. an LXC container whose seccomp or AppArmor profile refuses unshare and mount
    root = host_tree(tmp_path, caps=FULL_CAPS, mounts=ROOT_EXT4, environ="container=lxc\0")
    c = check_container_host(settings, root, environ={},
                             probe=lambda: "creating namespaces failed: unshare: Operation not permitted")
    assert not c.ok and "lxc" in c.detail and "Operation not permitted" in c.detail


def test_no_container_evidence_means_no_probe(settings: Settings, tmp_path: Path) -> None:
    def probe() -> str:
        raise AssertionError("a plain host is not probed")

    root = host_tree(tmp_path, caps=DOCKER_DEFAULT_CAPS, mounts=ROOT_EXT4)  # a non-root user on a VM
    assert check_container_host(settings, root, environ={}, probe=probe).ok


# --- the NVIDIA driver against the CUDA build of torch, from a fake nvidia-smi and fake /proc (no GPU here) -------

H100 = "NVIDIA H100 80GB HBM3, 81559 MiB"


def fake_nvidia_smi(bin_dir: Path, *, driver: str, gpus: tuple[str, ...] = (H100,), fails: bool = False) -> Path:
    """An nvidia-smi on PATH that answers `--query-gpu=...` as the real one does (csv, one line a GPU)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    if fails:  # an NVML that cannot talk to the kernel module (a driver upgraded without a reboot)
        script.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    else:
        lines = "".join(f"echo '{g}, {driver}'\n" for g in gpus)  # builtins only: PATH holds just this folder
        script.write_text(f"#!/bin/sh\n{lines}")
    script.chmod(0o755)
    return bin_dir


def proc_driver(root: Path, driver: str) -> Path:
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  (dvs-builder@U16)  "
        "Thu Oct  2 22:40:54 UTC 2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    return root


def torch_with(cuda: str | None, available: bool, version: str = "2.13.0+cu130"):
    def probe() -> dict:
        return {"torch": version, "cuda": cuda, "available": available, "devices": 1 if available else 0,
                "warning": "" if available else "The NVIDIA driver on your system is too old (found version 12040)."}
    return probe


def test_an_old_driver_under_a_cuda_13_torch_fails_with_the_fix(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    # what a rented server with the 550 driver does: nvidia-smi works, torch sees no GPU, the engine dies
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", driver="550.54.15")))
    settings.profile = "gpu"
    c = check_gpus(settings, root=tmp_path, probe_torch=torch_with("13.0", False))
    assert not c.ok and c.required
    assert "driver 550.54.15" in c.detail and "CUDA 13.0" in c.detail and "needs driver 580 or newer" in c.detail
    assert "torch.cuda.is_available() is False" in c.detail
    assert "580" in c.hint and "update the NVIDIA driver" in c.hint and "CUDA 12" in c.hint


def test_a_580_driver_under_a_cuda_13_torch_passes(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", driver="580.95.05", gpus=(H100, H100))))
    settings.profile = "gpu"
    c = check_gpus(settings, root=tmp_path, probe_torch=torch_with("13.0", True))
    assert c.ok, c.detail
    assert c.detail.startswith("2 GPU(s): NVIDIA H100 80GB HBM3, 81559 MiB")
    assert "driver 580.95.05" in c.detail and "torch 2.13.0+cu130 (CUDA 13.0, needs driver 580 or newer)" in c.detail
    assert "sees 1 GPU(s)" in c.detail


def test_the_driver_is_read_from_proc_when_nvidia_smi_fails(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", driver="", fails=True)))
    root = proc_driver(tmp_path / "root", "550.163.01")
    settings.profile = "gpu"
    c = check_gpus(settings, root=root, probe_torch=torch_with("13.0", False))
    assert not c.ok and "driver 550.163.01 (/proc/driver/nvidia/version)" in c.detail
    assert "nvidia-smi failed" in c.detail and "580" in c.hint


def test_no_gpu_says_cpu_profile_plainly(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    def probe() -> dict:
        raise AssertionError("no GPU: torch is not asked")

    c = check_gpus(settings, root=tmp_path, probe_torch=probe)
    assert c.ok and not c.required and c.detail.startswith("no NVIDIA GPU: cpu profile")


def test_the_thresholds_are_data() -> None:
    from appliance.doctor import CUDA_MIN_DRIVER

    assert CUDA_MIN_DRIVER[13] == 580 and CUDA_MIN_DRIVER[12] < 580


def test_a_torch_that_cannot_be_asked_is_a_failed_check_not_a_crash(settings: Settings, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", driver="580.95.05")))
    settings.profile = "gpu"

    def broken() -> dict:
        raise RuntimeError("importing torch failed: ImportError: libcudart.so.13: cannot open shared object file")

    c = check_gpus(settings, root=tmp_path, probe_torch=broken)
    assert not c.ok and "driver 580.95.05" in c.detail and "libcudart.so.13" in c.detail and c.hint
