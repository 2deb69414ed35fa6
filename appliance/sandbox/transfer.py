"""Workspaces move in and out of sandboxes as tar archives built and read in memory on the host.

No sandbox ever sees a host directory that the host writes to while task code runs: what goes in is an
archive the host built (`pack_files` from a task's text, `pack_dir` from a host-only directory, read
without following links); what comes out is an archive from the untrusted side that `sanitize` re-packs
through tarfile's 'data' filter, so absolute paths, links pointing out of the tree, devices and FIFOs are
dropped (and named, so callers can record them as tampering) before anything touches a host disk.
`overlay` puts a task's protected files over such an archive. `shell_put` / `shell_get` carry archives
through a sandbox's persistent shell (base64 on stdin/stdout: ~ms instead of a `podman exec` each).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.errors import SandboxError

_FAKE_ROOT = "/appliance-archive-root"  # where data_filter pretends to extract, to judge links
_KINDS = {tarfile.FIFOTYPE: "fifo", tarfile.CHRTYPE: "device", tarfile.BLKTYPE: "device",
          tarfile.SYMTYPE: "link", tarfile.LNKTYPE: "hard link"}


def _compact(data: bytes) -> bytes:
    """Drop tarfile's padding to a 10 KiB record (most of a small archive): the members, then the two
    zero blocks that end an archive. The end of the members is where tarfile's reader stops after the
    last one (its data padded to 512), not the last non-zero byte: a member's own data may end in zeros
    (an uncompressed .tar in the workspace ends in kilobytes of them)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        tar.getmembers()
        end = tar.offset
    return data[:end] + b"\0" * 1024


def _norm(name: str) -> str:
    parts = [p for p in PurePosixPath(name).parts if p not in (".", "/")]
    return "/".join(parts)


def pack_files(files: Mapping[str, str | bytes]) -> bytes:
    """An archive of workspace files (path -> text), parent directories included, owned by the agent."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, content in files.items():
            parts = PurePosixPath(rel).parts
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(_norm(rel))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return _compact(buf.getvalue())


def pack_dir(root: Path) -> tuple[bytes, list[str]]:
    """An archive of a host directory nothing else writes to; links are stored as links (never followed),
    special files are left out and named in the second value."""
    buf = io.BytesIO()
    dropped: list[str] = []
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for cur, dirs, files in os.walk(root):
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(cur, name)
                rel = os.path.relpath(path, root)
                mode = os.lstat(path).st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                    dropped.append(f"{rel} (special file)")
                    continue
                info = tar.gettarinfo(path, arcname=rel)
                if stat.S_ISREG(mode):
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    data, more = sanitize(buf.getvalue())
    return data, dropped + more


def sanitize(data: bytes) -> tuple[bytes, list[str]]:
    """Re-pack an untrusted archive: members that the 'data' filter refuses are dropped and named."""
    out = io.BytesIO()
    dropped: list[str] = []
    try:
        src = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except tarfile.TarError as e:
        raise SandboxError(f"the workspace archive is unreadable: {e}", "an infra error; retry") from None
    with src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            name = _norm(member.name)
            if not name:
                continue
            try:
                clean = tarfile.data_filter(member, _FAKE_ROOT)
            except tarfile.FilterError as e:
                dropped.append(f"{name} ({_KINDS.get(member.type, 'entry')}: {type(e).__name__})")
                continue
            if clean.isdev() or clean.isfifo():
                dropped.append(f"{name} ({_KINDS.get(clean.type, 'special file')})")
                continue
            mode = clean.mode if clean.mode is not None else (member.mode & 0o777)  # None: links
            clean = clean.replace(name=name, mode=mode, uid=0, gid=0, uname="", gname="", deep=False)
            if clean.islnk():
                clean = clean.replace(linkname=_norm(clean.linkname), deep=False)
            dst.addfile(clean, src.extractfile(member) if clean.isreg() else None)
    return _compact(out.getvalue()), dropped


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {_norm(m.name): m for m in tar if _norm(m.name)}


def read_member(data: bytes, name: str) -> bytes | None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar:
            if _norm(m.name) == name and m.isreg():
                f = tar.extractfile(m)
                return f.read() if f else None
    return None


def overlay(data: bytes, files: Mapping[str, str]) -> tuple[bytes, list[str]]:
    """Put `files` (path -> text) over a sanitized archive; return it and the paths that differed.

    Whatever stands in a restored file's way is dropped: the old entry, anything under it, and a link or
    file where one of its parent directories belongs (it could redirect the restored file).
    """
    want = {p: hashlib.sha256(t.encode()).hexdigest() for p, t in files.items()}
    parents = {"/".join(PurePosixPath(p).parts[:i]) for p in files for i in range(1, len(PurePosixPath(p).parts))}
    changed = []
    for path in files:
        got = read_member(data, path)
        if got is None or hashlib.sha256(got).hexdigest() != want[path]:
            changed.append(path)
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src:
            name = _norm(m.name)
            if name in files or any(name.startswith(p + "/") for p in files) or (name in parents and not m.isdir()):
                continue
            if m.islnk() and (m.linkname in files or m.linkname in parents):
                continue
            dst.addfile(m, src.extractfile(m) if m.isreg() else None)
        restored = tarfile.open(fileobj=io.BytesIO(pack_files(files)), mode="r:")
        with restored:
            for m in restored:
                dst.addfile(m, restored.extractfile(m) if m.isreg() else None)
    return _compact(out.getvalue()), changed


def without(data: bytes, paths: list[str]) -> bytes:
    """The archive minus `paths` and everything under them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src:
            name = _norm(m.name)
            if not any(name == p or name.startswith(p + "/") for p in paths):
                dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return _compact(out.getvalue())


def unpack(data: bytes, dest: Path) -> None:
    """Extract a sanitized archive into `dest` (a fresh host directory)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        tar.extractall(dest, filter=_skip_unsafe)


def _skip_unsafe(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    try:
        return tarfile.data_filter(member, path)
    except tarfile.FilterError:
        return None


# --- through the persistent shell ------------------------------------------------------------------
_EOF = "__APPLIANCE_TAR_EOF__"


def shell_put(shell: Any, data: bytes, dest: str = "/workspace", timeout: float = 60) -> None:
    """Extract an archive at `dest` inside the sandbox (as the agent: no owners, umask'd modes)."""
    b64 = base64.encodebytes(data).decode()
    r = shell.run(f"base64 -d <<'{_EOF}' | tar -x --no-same-owner -C {dest}\n{b64}{_EOF}\n", timeout=timeout)
    if r.exit_code != 0 or r.timed_out:
        raise SandboxError(f"copying the workspace into the sandbox failed ({r.exit_code}): {r.stderr.strip()[-300:]}",
                           "an infra error; `appliance doctor` checks the sandbox")


def shell_get(shell: Any, src: str = "/workspace", timeout: float = 60) -> tuple[bytes, list[str]] | None:
    """The tree at `src` as a sanitized archive and what was dropped; None when the shell's output cap cut it
    (then use `Sandbox.get_tar`). Unreadable files are left out (the agent's doing), never an error."""
    r = shell.run(f"tar -c --ignore-failed-read -C {src} . | base64 -w0", timeout=timeout)
    if r.truncated:
        return None
    if r.exit_code != 0 or r.timed_out:
        raise SandboxError(f"copying the workspace out of the sandbox failed ({r.exit_code}): {r.stderr.strip()[-300:]}",
                           "an infra error; `appliance doctor` checks the sandbox")
    data, dropped = sanitize(base64.b64decode(r.stdout))
    return data, dropped + ignored_by_tar(r.stderr)


def ignored_by_tar(stderr: str) -> list[str]:
    """Sockets (and unreadable files) tar left out, from its warnings."""
    out = []
    for line in stderr.splitlines():
        if line.startswith("tar: ") and (": socket ignored" in line or "Cannot open" in line):
            name = line[5:].split(": ", 1)[0]
            out.append(f"{_norm(name)} ({'socket' if 'socket' in line else 'unreadable'})")
    return out
