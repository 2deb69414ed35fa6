"""The sandbox image, built offline: mmdebstrap rootfs from the Debian mirror apt uses → `FROM scratch`.

The recipe lives in appliance/sandbox/image/ (Containerfile, packages, door-relay.py, judge-launcher.py,
appliance_check.py). The image tag is
a hash of those files, so `build_image` is a no-op until the recipe changes. The rootfs tarball is cached
under $APPLIANCE_HOME/cache keyed by the package list and the apt sources alone, so editing only the
Containerfile or the relay rebuilds in seconds instead of re-running mmdebstrap (about a minute).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from appliance.config import Settings
from appliance.errors import SetupError
from appliance.sandbox.podman import podman, podman_env, write_podman_config

RECIPE_DIR = Path(__file__).parent / "image"
RECIPE_FILES = ("Containerfile", "packages", "door-relay.py", "judge-launcher.py", "appliance_check.py")
SUITE = "bookworm"
APT_DIR = Path("/etc/apt")
# Docs, man pages and translations are dead weight in a sandbox (and ~30% of the rootfs).
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*",
                 "/usr/share/lintian/*")


def packages() -> list[str]:
    lines = (RECIPE_DIR / "packages").read_text().splitlines()
    return [w for line in lines if (w := line.split("#")[0].strip())]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:12]


def image_ref(settings: Settings) -> str:
    tag = _digest(*((RECIPE_DIR / f).read_bytes() for f in RECIPE_FILES))
    return f"{settings.sandbox.image}:{tag}"


def image_exists(settings: Settings, ref: str | None = None) -> bool:
    proc = podman(settings, "image", "exists", ref or image_ref(settings), check=False, timeout=60)
    return proc.returncode == 0


def apt_sources(apt_dir: Path = APT_DIR) -> Path:
    """The sources file apt itself uses, so mmdebstrap reaches the same (possibly local) mirror.

    Debian's images name it debian.sources; an mmdebstrap rootfs (our container's cpu base) 0000debian.sources.
    """
    candidates = [apt_dir / "sources.list.d" / "debian.sources",
                  *sorted((apt_dir / "sources.list.d").glob("*.sources")),
                  apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in candidates:
        if path.is_file() and path.read_text().strip():
            return path
    raise SetupError(f"no Debian apt sources found (looked for {apt_dir}/sources.list and {apt_dir}/sources.list.d/*)",
                     "configure apt so `apt-get update` works; the sandbox image is built from its mirror")


def rootfs_key(sources: Path) -> str:
    """What the rootfs depends on: the package list, the apt sources, the suite (not the Containerfile)."""
    return _digest(" ".join(packages()).encode(), sources.read_bytes(), SUITE.encode())


def rootfs_tarball(settings: Settings, log: Callable[[str], None] = print) -> Path:
    sources = apt_sources()
    key = rootfs_key(sources)
    cache = settings.home / "cache"
    tar = cache / f"sandbox-rootfs-{key}.tar"
    if tar.exists():
        return tar
    if shutil.which("mmdebstrap") is None:
        raise SetupError("mmdebstrap is not installed", "run scripts/setup, or `apt-get install mmdebstrap`")
    cache.mkdir(parents=True, exist_ok=True)
    log(f"building the sandbox rootfs with mmdebstrap from {sources} (about a minute)")
    partial = tar.with_suffix(".partial")
    cmd = ["mmdebstrap", "--variant=minbase", "--format=tar", "--include=" + ",".join(packages()),
           *(f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES), "--dpkgopt=path-include=/usr/share/doc/*/copyright",
           SUITE, str(partial), str(sources)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise SetupError(f"mmdebstrap failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}",
                         "check that `apt-get update` reaches the Debian mirror, then run `appliance init` again")
    partial.replace(tar)
    for old in cache.glob("sandbox-rootfs-*.tar"):
        if old != tar:
            old.unlink(missing_ok=True)
    return tar


def build_image(settings: Settings, log: Callable[[str], None] = print) -> str:
    """Build the sandbox image unless one with this recipe's hash exists; return its reference."""
    write_podman_config(settings)
    ref = image_ref(settings)
    if image_exists(settings, ref):
        return ref
    tar = rootfs_tarball(settings, log)
    log(f"building {ref}")
    with tempfile.TemporaryDirectory(dir=tar.parent, prefix="build-") as ctx:
        for f in RECIPE_FILES:
            shutil.copy(RECIPE_DIR / f, Path(ctx) / f)
        os.link(tar, Path(ctx) / "rootfs.tar")  # same filesystem: no 200 MB copy
        proc = subprocess.run(
            ["podman", "build", "--pull=never", "--network=none", "--layers=false", "-t", ref,
             "-f", str(Path(ctx) / "Containerfile"), ctx],
            env=podman_env(settings), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"podman build of {ref} failed: {proc.stderr.strip()[-2000:]}",
                         "`appliance doctor` checks podman; fix it, then run `appliance init` again")
    # Older recipes' images only take space; containers never use them (the tag pins the recipe).
    out = podman(settings, "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                 f"reference={settings.sandbox.image}", check=False).stdout.decode().split()
    stale = [r for r in out if r.rsplit(":", 1)[-1] != ref.rsplit(":", 1)[-1]]
    if stale:
        podman(settings, "rmi", "--ignore", *stale, check=False)
    return ref

