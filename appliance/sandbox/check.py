"""`check_podman`: the doctor's end-to-end test of the sandbox machinery, with a fix for each failure."""

from __future__ import annotations

import shutil
import time

from appliance.config import Settings
from appliance.errors import ApplianceError
from appliance.sandbox.image import image_exists, image_ref
from appliance.sandbox.podman import PODMAN_HINT, podman, write_podman_config
from appliance.sandbox.sandbox import Sandbox


def check_podman(settings: Settings) -> tuple[bool, str, str]:
    """(ok, detail, hint): podman present, its runtime works, the image is built, a hardened sandbox runs."""
    if shutil.which("podman") is None:
        return False, "podman is not installed (not on PATH)", PODMAN_HINT
    try:
        write_podman_config(settings)
        info = podman(settings, "info", "--format", "{{.Version.Version}} {{.Host.OCIRuntime.Name}}",
                      check=False, timeout=60)
        if info.returncode != 0:
            err = info.stderr.decode(errors="replace").strip()
            return False, f"podman does not work with the appliance's config: {err}", (
                f"check podman.runtime (now {settings.podman.runtime!r}; runc works where crun fails on cgroup v1) "
                f"and {settings.podman_dir}/containers.conf")
        version = info.stdout.decode().strip()
        if not image_exists(settings):
            return False, f"podman {version} works, but the sandbox image {image_ref(settings)} is not built", (
                "run `appliance init` (builds it offline from the Debian mirror)")
        t0 = time.monotonic()
        with Sandbox.start(settings) as sb:
            r = sb.exec("id -u; (exec 3<>/dev/tcp/1.1.1.1/53) 2>&1 || true; touch /etc/x 2>&1 || true", timeout=30)
        took = time.monotonic() - t0
    except ApplianceError as e:
        return False, e.message, e.hint
    lines = r.stdout + r.stderr
    if r.exit_code != 0 or not r.stdout.startswith("1000"):
        return False, f"a hardened sandbox ran but misbehaved (exit {r.exit_code}): {lines.strip()[:300]}", (
            "rebuild the image with `appliance init`; `appliance sandbox exec -- id` shows what runs")
    if "unreachable" not in lines or "Read-only" not in lines:
        return False, f"a sandbox is not isolated as expected: {lines.strip()[:300]}", (
            "the appliance needs --network=none and --read-only to work; check podman's version and config")
    return True, f"podman {version}: a hardened sandbox (no network, read-only root, uid 1000) ran in {took:.2f} s", ""


def check_isolation(settings: Settings) -> tuple[bool, str, str]:
    """(ok, detail, hint): what bounds a sandbox's workspace and whether new user namespaces are refused."""
    from appliance.sandbox.sandbox import SECCOMP_PROFILE, workspace_bytes

    cap = workspace_bytes(settings)
    mechanism = f"/workspace is a tmpfs inside each sandbox capped at {cap // 2**20} MiB (counted in sandbox.memory)"
    if settings.sandbox.block_user_namespaces and not SECCOMP_PROFILE.is_file():
        return False, f"the seccomp profile {SECCOMP_PROFILE} is missing", "reinstall the appliance package"
    if shutil.which("podman") is None or not image_exists(settings):
        return False, f"{mechanism}; not tried: podman or the sandbox image is missing", "see the podman check"
    try:
        with Sandbox.start(settings) as sb:
            r = sb.exec("df -B1 --output=fstype,size /workspace | tail -1; unshare -r true 2>&1 && echo USERNS",
                        timeout=30)
    except ApplianceError as e:
        return False, e.message, e.hint
    fields = r.stdout.split()
    if fields[:2] != ["tmpfs", str(cap)]:
        return False, f"/workspace is not the capped tmpfs expected ({r.stdout.strip()[:200]})", (
            "check sandbox.workspace_size and podman's --tmpfs support")
    if "USERNS" in r.stdout and settings.sandbox.block_user_namespaces:
        return False, f"{mechanism}, but a sandbox could create a user namespace", (
            "podman ignored --security-opt seccomp=...: check that podman was built with seccomp support")
    userns = "new user namespaces refused (seccomp)" if settings.sandbox.block_user_namespaces else (
        "new user namespaces ALLOWED (sandbox.block_user_namespaces = false)")
    return True, f"{mechanism}; {userns}; no host directory is shared with task code", ""
