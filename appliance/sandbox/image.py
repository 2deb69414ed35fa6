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


DEBIAN_MIRROR = "http://deb.debian.org/debian"  # APPLIANCE_DEBIAN_MIRROR names another (as scripts/container)
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"  # APPLIANCE_DEBIAN_SECURITY_MIRROR; "none": left out
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


def apt_sources(apt_dir: Path = APT_DIR, generated: Path | None = None) -> Path:
    """The Debian sources mmdebstrap builds the rootfs from: the host's own where they are Debian's, so a local
    mirror stays in use (Debian's images name the file debian.sources, an mmdebstrap rootfs 0000debian.sources);
    on a host whose sources are Ubuntu's (most GPU clouds: its archive has no bookworm) Debian's mirror instead,
    written to `generated`."""
    candidates = [apt_dir / "sources.list.d" / "debian.sources",
                  *sorted((apt_dir / "sources.list.d").glob("*.sources")),
                  apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in candidates:
        if path.is_file() and (text := path.read_text()).strip() and "ubuntu" not in text.lower():
            return path
    if generated is None:
        raise SetupError(f"no Debian apt sources found (looked for {apt_dir}/sources.list and "
                         f"{apt_dir}/sources.list.d/*)", "configure apt so `apt-get update` works; the sandbox "
                         "image is built from its mirror")
    if not DEBIAN_KEYRING.is_file():
        raise SetupError(f"this host's apt sources are not Debian's and there is no Debian archive keyring at "
                         f"{DEBIAN_KEYRING}", "apt-get install debian-archive-keyring (Ubuntu has it in universe), "
                         "then run `appliance init` again")
    mirror = os.environ.get("APPLIANCE_DEBIAN_MIRROR", DEBIAN_MIRROR)
    security = os.environ.get("APPLIANCE_DEBIAN_SECURITY_MIRROR", DEBIAN_SECURITY_MIRROR)
    stanzas = [f"Types: deb\nURIs: {mirror}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\n"
               f"Signed-By: {DEBIAN_KEYRING}\n"]
    if security != "none":
        stanzas.append(f"Types: deb\nURIs: {security}\nSuites: {SUITE}-security\nComponents: main\n"
                       f"Signed-By: {DEBIAN_KEYRING}\n")
    generated.parent.mkdir(parents=True, exist_ok=True)
    generated.write_text("\n".join(stanzas))
    return generated


def rootfs_key(sources: Path) -> str:
    """What the rootfs depends on: the package list, the apt sources, the suite (not the Containerfile)."""
    return _digest(" ".join(packages()).encode(), sources.read_bytes(), SUITE.encode())


def rootfs_tarball(settings: Settings, log: Callable[[str], None] = print) -> Path:
    cache = settings.home / "cache"
    sources = apt_sources(generated=cache / "debian.sources")
    key = rootfs_key(sources)
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

