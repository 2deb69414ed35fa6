"""Workspaces move in and out of sandboxes as tar archives built and read in memory on the host.

No sandbox ever sees a host directory that the host writes to while task code runs: what goes in is an
archive the host built (`pack_files` from a task's text, `pack_dir` from a host-only directory, read
without following links); what comes out is an archive from the untrusted side that `sanitize` re-packs
with the rules of tarfile's 'data' filter (our own copy: the container's Python 3.11.2 predates it), so
paths out of the tree, links pointing out of it (resolved through the tree's other links, as the kernel
would), sparse members, devices and FIFOs are dropped (and named, so callers can
record them as tampering) before anything touches a host disk. `unpack` writes only directories and
regular files on the host, never links, so no later member can be redirected through one.
`overlay` puts a task's protected files over such an archive. `shell_put` / `shell_get` carry archives
through a sandbox's persistent shell (base64 on stdin/stdout: ~ms instead of a `podman exec` each).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import os
import stat
import tarfile
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from appliance.errors import SandboxError

if TYPE_CHECKING:
    from appliance.seams import SandboxShell

_KINDS = {tarfile.FIFOTYPE: "fifo", tarfile.CHRTYPE: "device", tarfile.BLKTYPE: "device",
          tarfile.SYMTYPE: "link", tarfile.LNKTYPE: "hard link"}


def _closed(tar: tarfile.TarFile, buf: io.BytesIO) -> bytes:
    """Close a writer and return its archive without tarfile's padding to a 10 KiB record (most of a small
    archive): the members up to where the last one ends, then the two zero blocks that end an archive.
    (Never strip trailing zeros instead: a member's own data may end in them.)"""
    end = tar.offset
    tar.close()
    return buf.getvalue()[:end] + b"\0" * 1024


def _outside(path: str) -> bool:
    return path.startswith("/") or ".." in PurePosixPath(os.path.normpath(path)).parts


# Longer paths cannot be recreated under a host or sandbox directory (PATH_MAX is 4096 bytes with the
# directory in front); a tree that deep is what an agent leaves to break the copy, never a task's files.
MAX_PATH_BYTES = 3072


def _refusal(member: tarfile.TarInfo, name: str) -> str | None:
    """Why the 'data' filter's rules refuse a member from the untrusted side, or None."""
    if ".." in PurePosixPath(member.name).parts:
        return "path outside the tree"
    if len(name.encode(errors="surrogateescape")) > MAX_PATH_BYTES or any(
            len(p.encode(errors="surrogateescape")) > 255 for p in PurePosixPath(name).parts):
        return "path too long"
    if member.isdev() or member.isfifo():
        return _KINDS.get(member.type, "special file")
    if member.issym() and _outside(os.path.join(os.path.dirname(name), member.linkname)):
        return "link: points outside the tree"
    if member.islnk() and _outside(member.linkname):
        return "hard link: points outside the tree"
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "special file"
    return None


_MAX_HOPS = 40  # as the kernel's ELOOP limit: a longer chain is refused, never followed further
# Path components the link check may walk for one archive: a tree's links take a few each, while 20,000 links
# that each follow 40 long links in turn would hold the host's CPU for many minutes.
RESOLVE_STEPS = 400_000


def _resolves_inside(path: str, links: Mapping[str, str], budget: list[int], follow_last: bool = True) -> bool | None:
    """Whether `path` (from the tree's root) stays in the tree when every component the tree holds as a
    symbolic link (`links`: name -> target) is followed the way the kernel would, `..` included: the
    lexical check alone passes `sub/x -> d/../../etc/passwd` beside `sub/d -> .`, which is /etc/passwd.
    None when `budget` (steps left, shared by the archive's links) runs out first."""
    stack: list[str] = []  # the path so far, each entry the whole prefix (the key into `links`)
    budget[0] -= path.count("/") + 1
    todo = deque(p for p in path.split("/") if p not in ("", "."))
    hops = 0
    while todo:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        part = todo.popleft()
        if part == "..":
            if not stack:
                return False
            stack.pop()
            continue
        stack.append(f"{stack[-1]}/{part}" if stack else part)
        target = links.get(stack[-1])
        if target is None or (not todo and not follow_last):
            continue
        hops += 1
        if hops > _MAX_HOPS or target.startswith("/"):
            return False
        budget[0] -= target.count("/") + 1  # (before the split: a target of 2,000 `./` costs as much)
        stack.pop()
        todo.extendleft(reversed([p for p in target.split("/") if p not in ("", ".")]))
    return True


def _escaping_links(symlinks: dict[str, str], hardlinks: dict[str, str]) -> dict[str, str]:
    """The links of a tree that leave it once its other links are followed (name -> why). One round is
    enough: a path that passes through a link that leaves the tree leaves it at that point too, so no kept
    link goes through a dropped one (and in the kernel's eyes a dropped link is a missing name: ENOENT)."""
    out, budget = {}, [RESOLVE_STEPS]
    why = {False: "points outside the tree through links", None: "too many links to resolve"}
    for n, t in symlinks.items():
        inside = _resolves_inside(f"{n.rsplit('/', 1)[0]}/{t}" if "/" in n else t, symlinks, budget)
        if not inside:
            out[n] = f"link: {why[inside]}"
    kept = {n: t for n, t in symlinks.items() if n not in out}
    # a hard link's target is a path from the root; link() follows all but its last component
    for n, t in hardlinks.items():
        if not (inside := _resolves_inside(t, kept, budget, follow_last=False)):
            out[n] = f"hard link: {why[inside]}"
    return out


def _norm(name: str) -> str:
    parts = [p for p in PurePosixPath(name).parts if p not in (".", "/")]
    return "/".join(parts)


def pack_files(files: Mapping[str, str | bytes]) -> bytes:
    """An archive of workspace files (path -> text), parent directories included, owned by the agent.

    Stamped with the current time, as files written now would be: a task about file ages (`find -mtime`)
    sets its old files' times in setup, and everything else must read as new, never as 1970."""
    stamp = int(time.time())
    buf = io.BytesIO()
    dirs: set[str] = set()
    tar = tarfile.open(fileobj=buf, mode="w")
    for rel, content in files.items():
        parts = PurePosixPath(rel).parts
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                info = tarfile.TarInfo(d)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, stamp
                tar.addfile(info)
        data = content.encode() if isinstance(content, str) else content
        info = tarfile.TarInfo(_norm(rel))
        info.size, info.mode, info.mtime = len(data), 0o644, stamp
        tar.addfile(info, io.BytesIO(data))
    return _closed(tar, buf)


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


# A task's workspace has tens of files, a git repository in one a few hundred: more members than this are
# what an agent leaves to make the copy (or the next sandbox's tmpfs, a page a file) its weapon.
MAX_MEMBERS = 20_000
PAGE = 4096  # a tmpfs holds a non-empty file in whole pages
# A tampering record names at most this many entries of at most this many characters (a deep tree named
# path by path grew with the square of its depth: 122 MiB in one rollout's error).
TAMPER_SHOWN, TAMPER_WIDTH = 40, 240


def capped(items: list[str]) -> list[str]:
    """At most TAMPER_SHOWN entries, each shortened to TAMPER_WIDTH characters, then how many more."""
    cut = TAMPER_WIDTH // 2
    out = [i if len(i) <= TAMPER_WIDTH else f"{i[:cut]}...{i[-cut:]}" for i in items[:TAMPER_SHOWN]]
    if len(items) > TAMPER_SHOWN:
        out.append(f"{len(items) - TAMPER_SHOWN} more")
    return out


def tmpfs_bytes(sizes: Iterable[int]) -> int:
    """What files of these sizes take in a tmpfs (whole pages), which is what its size cap counts."""
    return sum(-(-n // PAGE) * PAGE for n in sizes)


def sanitize(data: bytes | IO[bytes], cap: int | None = None) -> tuple[bytes, list[str]]:
    """Re-pack an untrusted archive (bytes, or a file read once as a stream): members that the 'data'
    filter refuses are dropped and named, and so are the members past MAX_MEMBERS, every sparse member, and,
    with `cap`, the regular files past `cap` bytes in all. A sparse file (`truncate -s 3G`) costs nothing in
    a tmpfs and arrives as a few blocks (`tar -S`), but re-packed it would be written out whole (10 KiB
    became 1 GiB): it is refused, never expanded."""
    out = io.BytesIO()
    dropped: list[str] = []
    try:
        src = tarfile.open(fileobj=io.BytesIO(data) if isinstance(data, bytes) else data, mode="r|")
    except tarfile.TarError as e:
        raise SandboxError(f"the workspace archive is unreadable: {e}", "an infra error; retry") from None
    dst = tarfile.open(fileobj=out, mode="w")
    kept, total, over = 0, 0, 0
    symlinks: dict[str, str] = {}
    hardlinks: dict[str, str] = {}
    with src:
        try:
            for member in src:
                name = _norm(member.name)
                if not name:
                    continue
                refusal = _refusal(member, name)
                if refusal is not None:
                    dropped.append(f"{name} ({refusal})")
                    continue
                if kept >= MAX_MEMBERS:
                    over += 1
                    continue
                if member.issparse():  # never expanded: a few blocks here are its logical size on a host disk
                    dropped.append(f"{name} (sparse file of {member.size} bytes: refused, never expanded)")
                    continue
                if member.isreg() and cap is not None and total + member.size > cap:
                    dropped.append(f"{name} (file of {member.size} bytes: the workspace holds {cap} in all)")
                    continue
                kept += 1
                total += member.size if member.isreg() else 0
                # As the 'data' filter: no setuid/setgid/sticky, no group/other write; files owner-rw.
                mode = member.mode & 0o755 | (0o600 if member.isreg() else 0)
                clean = copy.copy(member)  # (TarInfo.replace is 3.11.4+)
                clean.name, clean.mode, clean.uid, clean.gid, clean.uname, clean.gname = name, mode, 0, 0, "", ""
                clean.pax_headers = {}  # a copied pax 'path' would win over the cleaned name when written
                if clean.islnk():
                    clean.linkname = _norm(clean.linkname)
                symlinks.pop(name, None)
                hardlinks.pop(name, None)
                if clean.issym():
                    symlinks[name] = clean.linkname
                elif clean.islnk():
                    hardlinks[name] = clean.linkname
                dst.addfile(clean, src.extractfile(member) if clean.isreg() else None)
        except tarfile.TarError as e:
            dst.close()
            raise SandboxError(f"the workspace archive is unreadable: {e}", "an infra error; retry") from None
    if over:
        dropped.append(f"{over} members past the first {MAX_MEMBERS} (too many files)")
    escaping = _escaping_links(symlinks, hardlinks) if symlinks else {}
    if not escaping:
        return _closed(dst, out), dropped
    # (only a tree with such a chain pays for a second pass over its archive)
    data = _closed(dst, out)
    out = io.BytesIO()
    dst = tarfile.open(fileobj=out, mode="w")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as again:
        for m in again:
            if m.name not in escaping or not (m.issym() or m.islnk()):
                dst.addfile(m, again.extractfile(m) if m.isreg() else None)
    return _closed(dst, out), dropped + [f"{n} ({why})" for n, why in escaping.items()]


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
    dst = tarfile.open(fileobj=out, mode="w")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
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
    return _closed(dst, out), changed


def reroot(data: bytes, top: str) -> bytes:
    """The members under `top/` of a sanitized archive, named relative to it (`top` itself left out):
    a tree copied out as `workspace/...` becomes the archive `pack_dir` makes of the same tree."""
    out = io.BytesIO()
    dst = tarfile.open(fileobj=out, mode="w")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
        for m in src:
            name = _norm(m.name)
            if not name.startswith(top + "/"):
                continue
            clean = copy.copy(m)
            clean.name = name[len(top) + 1:]
            if clean.islnk():  # hard links name their target from the archive's root
                if not _norm(m.linkname).startswith(top + "/"):
                    continue
                clean.linkname = _norm(m.linkname)[len(top) + 1:]
            dst.addfile(clean, src.extractfile(m) if m.isreg() else None)
    return _closed(dst, out)


def replace_members(data: bytes, contents: Mapping[str, bytes]) -> bytes:
    """The archive with the data of the regular files named in `contents` replaced (modes and times kept)."""
    out = io.BytesIO()
    dst = tarfile.open(fileobj=out, mode="w")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
        for m in src:
            name = _norm(m.name)
            if name in contents and m.isreg():
                clean = copy.copy(m)
                clean.size = len(contents[name])
                dst.addfile(clean, io.BytesIO(contents[name]))
            else:
                dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return _closed(dst, out)


def substitute(data: bytes, contents: Mapping[str, bytes]) -> bytes:
    """The archive with the members named in `contents`, of whatever kind (a link included), replaced by
    regular files (mode 0644) holding that data."""
    out = io.BytesIO()
    dst = tarfile.open(fileobj=out, mode="w")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
        for m in src:
            name = _norm(m.name)
            if name in contents:
                regular = tarfile.TarInfo(m.name)
                regular.size, regular.mode, regular.mtime = len(contents[name]), 0o644, m.mtime
                dst.addfile(regular, io.BytesIO(contents[name]))
            else:
                dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return _closed(dst, out)


def without(data: bytes, paths: list[str]) -> bytes:
    """The archive minus `paths` and everything under them."""
    out = io.BytesIO()
    dst = tarfile.open(fileobj=out, mode="w")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
        for m in src:
            name = _norm(m.name)
            if not any(name == p or name.startswith(p + "/") for p in paths):
                dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return _closed(dst, out)


def unpack(data: bytes, dest: Path) -> None:
    """Extract a sanitized archive into `dest` (a fresh host directory): directories and regular files
    only. Links are not recreated on the host, so nothing written later can be redirected through one."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar:
            name = _norm(m.name)
            if not name or ".." in PurePosixPath(name).parts:
                continue
            target = dest / name
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif m.isreg():
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    if src is not None:
                        f.write(src.read())
                os.chmod(target, m.mode & 0o755 | 0o600)
                os.utime(target, (m.mtime, m.mtime))


# --- through the persistent shell ------------------------------------------------------------------
_EOF = "__APPLIANCE_TAR_EOF__"


def shell_put(shell: SandboxShell, data: bytes, dest: str = "/workspace", timeout: float = 60) -> None:
    """Extract an archive at `dest` inside the sandbox (as the agent: no owners, umask'd modes)."""
    b64 = base64.encodebytes(data).decode()
    r = shell.run(f"base64 -d <<'{_EOF}' | tar -x --no-same-owner -C {dest}\n{b64}{_EOF}\n", timeout=timeout)
    if r.exit_code != 0 or r.timed_out:
        raise SandboxError(f"copying the workspace into the sandbox failed ({r.exit_code}): {r.stderr.strip()[-300:]}",
                           "an infra error; `appliance doctor` checks the sandbox")


def shell_get(shell: SandboxShell, src: str = "/workspace", timeout: float = 60,
              cap: int | None = None) -> tuple[bytes, list[str]] | None:
    """The tree at `src` as a sanitized archive and what was dropped (see `sanitize` for `cap`); None when
    the shell's output cap cut it (then use `Sandbox.get_tar`). Unreadable files are left out (the agent's
    doing), never an error. Sparse files travel as their data blocks (`tar -S`)."""
    r = shell.run(f"tar -c -S --ignore-failed-read -C {src} . | base64 -w0", timeout=timeout)
    if r.truncated:
        return None
    if r.exit_code != 0 or r.timed_out:
        raise SandboxError(f"copying the workspace out of the sandbox failed ({r.exit_code}): "
                           f"{r.stderr.strip()[-300:]}",
                           "an infra error; `appliance doctor` checks the sandbox")
    data, dropped = sanitize(base64.b64decode(r.stdout), cap)
    return data, capped(dropped + ignored_by_tar(r.stderr))


def ignored_by_tar(stderr: str) -> list[str]:
    """Sockets (and unreadable files) tar left out, from its warnings."""
    out = []
    for line in stderr.splitlines():
        if line.startswith("tar: ") and (": socket ignored" in line or "Cannot open" in line):
            name = line[5:].split(": ", 1)[0]
            out.append(f"{_norm(name)} ({'socket' if 'socket' in line else 'unreadable'})")
    return out
