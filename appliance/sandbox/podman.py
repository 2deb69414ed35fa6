"""The appliance's own Podman: config files, environment, one CLI runner, and the label sweep.

Every podman call of the appliance goes through `podman()` with `podman_env(settings)`, which points
podman at containers.conf / storage.conf under `settings.podman_dir` instead of the system files. Each
storage root gets its own tmp dir, lock files and network config dir, so an isolated root (one per test
session) never shares lock numbers with the main one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from appliance.config import Settings
from appliance.errors import SandboxError, SandboxStorageFull

LABEL = "appliance.sandbox"  # every container the appliance starts carries it; sweeps select by it
OWNER_LABEL = "appliance.owner_pid"
PODMAN_HINT = "run scripts/setup, or `apt-get install podman runc conmon catatonit fuse-overlayfs uidmap`"


STORAGE_LOW_BYTES = 64 * 2**20  # below this, or STORAGE_LOW_INODES, a sandbox may start and then fail mid-rollout
STORAGE_LOW_INODES = 1000


def check_storage(settings: Settings, podman_error: str = "") -> None:
    """Raise `SandboxStorageFull` when the disk under Podman's storage root is (nearly) full.

    Called before a sandbox starts, and after any podman command on one failed. The disk (bytes or inodes)
    decides, not podman's words: on a full storage root podman says "no space left on device", or times
    out waiting for its own exit file, or answers nothing at all (all three seen in the live case,
    tests/faults/test_podman_storage_full.py); and the few MiB that removing a failed sandbox frees let
    the next one start and fail half-way, hence the margin. A full workspace tmpfs inside one sandbox
    also says "no space left" but on a disk with room: that is the task's or the agent's doing, and stays
    a plain `SandboxError`. Nothing in a sandbox can fill the storage root itself (its root is read-only,
    what it writes is tmpfs, its log driver is none), so a full one is never the agent's doing."""
    root = settings.podman_graphroot
    try:
        st = os.statvfs(root)
    except OSError:
        return
    free, inodes = st.f_bavail * st.f_frsize, st.f_favail
    if free >= STORAGE_LOW_BYTES and (inodes >= STORAGE_LOW_INODES or st.f_files == 0):
        return
    said = podman_error.strip().splitlines()
    raise SandboxStorageFull(
        f"no sandbox can start: the disk under Podman's storage {root} is full ({free / 2**20:.0f} MiB and "
        f"{inodes} inodes free there, {STORAGE_LOW_BYTES // 2**20} MiB needed"
        + (f"; podman: {said[-1][-300:]})" if said else ")"),
        "free space on that disk (images and containers not the appliance's, other files), or set "
        "podman.graphroot to a larger disk and run `appliance init`; then `appliance run` continues the run")


def _toml_list(paths: Sequence[Path | str]) -> str:
    return "[" + ", ".join(f'"{p}"' for p in paths) + "]"


def run_root(settings: Settings) -> Path:
    """Volatile per-root state (runroot, tmp_dir, locks): on /run so a reboot clears stale state."""
    key = hashlib.sha256(str(settings.podman_graphroot).encode()).hexdigest()[:12]
    base = Path("/run") if os.access("/run", os.W_OK) else settings.home / "run"
    return base / "appliance-podman" / key


def write_podman_config(settings: Settings) -> None:
    """Write containers.conf and storage.conf for this storage root; idempotent, never touches /etc."""
    rr = run_root(settings)
    settings.podman_dir.mkdir(parents=True, exist_ok=True)
    settings.podman_graphroot.mkdir(parents=True, exist_ok=True)
    # default_ulimits = []: root here lacks CAP_SYS_RESOURCE, podman's default nofile limit fails.
    # json-file: podman-py's run() returns None with k8s-file. runc: crun fails on cgroup v1 hybrid.
    containers_conf = f"""# written by appliance (write_podman_config); edits are overwritten
[containers]
default_ulimits = []
log_driver = "json-file"

[engine]
runtime = "{settings.podman.runtime}"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{rr / 'events.log'}"
tmp_dir = "{rr / 'tmp'}"
lock_type = "file"
volume_path = "{settings.podman_graphroot / 'volumes'}"

[network]
network_config_dir = "{settings.podman_dir / 'networks'}"
"""
    storage_conf = f"""# written by appliance (write_podman_config); edits are overwritten
[storage]
driver = "{settings.podman.storage_driver}"
graphroot = "{settings.podman_graphroot}"
runroot = "{rr / 'runroot'}"

[storage.options]
additionalimagestores = {_toml_list(settings.podman.additional_image_stores)}
"""
    for name, text in (("containers.conf", containers_conf), ("storage.conf", storage_conf)):
        path = settings.podman_dir / name
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)


def podman_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(settings.podman_dir / "containers.conf")
    env["CONTAINERS_STORAGE_CONF"] = str(settings.podman_dir / "storage.conf")
    # A user's registries.conf/policy.json could make --pull=never builds reach out; none is needed.
    env.pop("CONTAINER_HOST", None)
    env.pop("CONTAINER_CONNECTION", None)
    return env


def podman_bin() -> str:
    path = shutil.which("podman")
    if path is None:
        raise SandboxError("podman is not installed (not on PATH)", PODMAN_HINT)
    return path


def podman_cwd(settings: Settings) -> str:
    settings.home.mkdir(parents=True, exist_ok=True)
    return str(settings.home)


def podman(settings: Settings, *args: str, timeout: float | None = 120, input: bytes | None = None,
           check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run `podman ARGS` with the appliance's config; raise SandboxError with podman's stderr on failure."""
    if not (settings.podman_dir / "containers.conf").exists():
        write_podman_config(settings)
    cmd = [podman_bin(), *args]
    try:
        # conmon drops an empty `oom` file into its working directory when a container is OOM-killed:
        # run podman from the data directory, not from wherever the appliance was started.
        proc = subprocess.run(cmd, env=podman_env(settings), input=input, capture_output=True, timeout=timeout,
                              cwd=podman_cwd(settings))
    except subprocess.TimeoutExpired as e:
        raise SandboxError(f"`podman {' '.join(args[:3])} ...` did not finish within {timeout} s",
                           "check `podman ps` for a stuck container; `appliance doctor` tests podman") from e
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise SandboxError(f"`podman {' '.join(args[:3])} ...` failed (exit {proc.returncode}): {err}",
                           "`appliance doctor` runs a sandbox end to end and explains podman problems")
    return proc


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(settings: Settings, *, orphans_only: bool = False) -> int:
    """Remove every appliance container of this storage root; return how many were removed.

    Called at start-up and shutdown. `orphans_only` keeps the containers whose owning process is still
    alive (a second process sharing the root), removing only the leftovers of a killed one.
    """
    if shutil.which("podman") is None:
        return 0
    out = podman(settings, "ps", "-a", "--filter", f"label={LABEL}", "--format",
                 f'{{{{.ID}}}} {{{{.Names}}}} {{{{index .Labels "{OWNER_LABEL}"}}}}', timeout=60).stdout.decode()
    removed: dict[str, str] = {}
    kept: set[str] = set()
    for line in out.splitlines():
        cid, name, owner = (line.split() + ["", ""])[:3]
        if orphans_only and owner.isdigit() and _pid_alive(int(owner)):
            kept.add(name)
        else:
            removed[cid] = name
    if removed:
        podman(settings, "rm", "-f", "-t", "0", "--ignore", *removed, timeout=120)
    _sweep_dirs(settings, set(removed.values()), kept, everything=not orphans_only)
    return len(removed)


def _sweep_dirs(settings: Settings, removed: set[str], kept: set[str], everything: bool) -> None:
    """Socket dirs and auto-created workspaces are named after their container; drop the dead ones.

    A dir without a container may belong to a sandbox another process is starting right now, so when
    other owners may be alive only the dirs of removed containers and stale ones (an hour old) go.
    """
    stale_before = time.time() - 3600
    for parent in (settings.sockets_dir, settings.home / "sandboxes"):
        if not parent.is_dir():
            continue
        for d in parent.iterdir():
            if d.name in kept:
                continue
            if everything or d.name in removed or d.stat().st_mtime < stale_before:
                shutil.rmtree(d, ignore_errors=True)


def remove_storage_root(settings: Settings) -> None:
    """Delete an (isolated) storage root: sweep, `podman system reset`, then the files.

    The reset runs with a config that lists no additional image stores, so a store shared in read-only
    (the main one, in tests) is never touched.
    """
    sweep(settings)
    alone = settings.model_copy(deep=True)
    alone.podman.additional_image_stores = []
    write_podman_config(alone)
    podman(alone, "system", "reset", "-f", check=False, timeout=300)
    shutil.rmtree(settings.podman_graphroot, ignore_errors=True)
    shutil.rmtree(run_root(settings), ignore_errors=True)
