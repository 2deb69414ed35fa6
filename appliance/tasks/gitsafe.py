"""Git in a verifier runs no program the agent configured, and sees the repository's state, not flags hiding it.

Git verifiers run `git status`, `git log`, `git show` in the agent's repository, and a repository's own
configuration applies to them: `core.fsmonitor` names a program git runs on `status`; so do hooks,
`diff.external`, textconv and filter drivers, pagers, `gpg.program` with `log.showSignature`, aliases,
credential helpers. Before a workspace reaches a verifier, `defuse_git` rewrites every git directory in its
archive (any directory with a HEAD of any kind and a config, objects/, refs/ or a commondir):

- its configuration (`config`, `config.worktree`) keeps only keys of sections on ALLOWED_SECTIONS minus the
  keys on DENIED (an allowlist, so an option this list does not know is dropped, not run); includes and
  hooks are dropped; a dropped key that would run a program is named as tampering;
- a config or HEAD that is not a regular file (a symbolic link, a hard link to another name: git follows
  both) is tampering: the config is replaced by a fresh one, a HEAD link into refs/ by the symbolic ref it
  meant; a `commondir` (objects, refs and configuration read from another directory) is tampering and
  removed, as are `info/grafts`;
- its index keeps no entry marked assume-unchanged or skip-worktree (`git update-index --assume-unchanged`
  makes `git status` report a changed file as clean): marked entries are tampering, and the index is
  rewritten without the flags (and without its optional caches); an index git would read with another
  index (split) or as directories (sparse), or cannot read, is removed as tampering;
- no ignore rule the task did not set hides a file from `git status`: an `info/exclude` with rules is
  emptied, a `.gitignore` no repository's index tracks is removed (one that ignores itself hid both), and a
  `.git` that is not a directory (a `gitdir:` file, a link: git would read another repository, one the
  agent made with everything committed) is removed; each is tampering, unless the task shipped the file as
  it stands. (The task's setup is not compared: a setup that writes such files has them taken away too,
  and its validation records it.)

`GIT_ENV` is the verifier's environment half: no system or global configuration, no replace refs, and the
same keys forced off from the command-line scope, which outranks the repository's.
"""

from __future__ import annotations

import hashlib
import re
import struct
import tarfile
from collections.abc import Mapping
from pathlib import PurePosixPath

from appliance.sandbox.transfer import members, read_member, replace_members, substitute, without

# Sections a verifier may need as the agent left them (identity, remotes, branches, formats).
ALLOWED_SECTIONS = frozenset({"core", "user", "remote", "branch", "init", "extensions", "commit", "tag", "pull",
                              "push", "merge", "advice", "color", "i18n", "fetch", "rebase", "status", "log",
                              "format", "rerere", "gc", "pack", "index", "feature", "author", "committer"})
# Keys that run a program, redirect git elsewhere, or hide the state a verifier reads ("*" = any subsection).
DENIED = frozenset({
    "core.fsmonitor", "core.hookspath", "core.pager", "core.editor", "core.sshcommand", "core.askpass",
    "core.gitproxy", "core.alternaterefscommand", "core.worktree", "core.attributesfile",
    "remote.*.uploadpack", "remote.*.receivepack", "remote.*.vcs", "remote.*.proxy",
    "merge.*.driver", "merge.*.recursive", "status.showuntrackedfiles", "log.showsignature",
    "commit.template", "tag.gpgsign", "commit.gpgsign", "push.gpgsign", "rebase.instructionformat",
    # state a verifier reads, hidden: ignore rules from a file of the agent's, stat data trusted blindly,
    # a sparse or split index, a cache of untracked files
    "core.excludesfile", "core.ignorestat", "core.sparsecheckout", "core.sparsecheckoutcone", "core.splitindex",
    "core.untrackedcache", "index.sparse", "index.skiphash",
})
# What the dropped keys of these sections do, for the tampering record.
RUNS_A_PROGRAM = re.compile(
    r"^(alias\..*|diff\.external|diff\..*\.(command|textconv)|(difftool|mergetool)\..*\.(cmd|path)|"
    r"filter\..*\.(clean|smudge|process)|gpg\.program|gpg\..*\.program|pager\..*|credential\.helper|"
    r"credential\..*\.helper|sequence\.editor|interactive\.difffilter|include\.path|includeif\..*\.path|"
    r"uploadpack\.packobjectshook|browser\..*\.cmd|man\..*\.cmd|submodule\..*\.update|"
    r"core\.(fsmonitor|hookspath|pager|editor|sshcommand|askpass|gitproxy|alternaterefscommand)|"
    r"remote\..*\.(uploadpack|receivepack|vcs)|merge\..*\.driver|log\.showsignature)$")
# The environment half: the command-line scope outranks the repository's configuration.
_FORCED = (("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"), ("core.pager", "cat"),
           ("log.showSignature", "false"), ("safe.directory", "*"), ("core.untrackedCache", "false"),
           ("core.splitIndex", "false"), ("index.sparse", "false"))
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
           "GIT_NO_REPLACE_OBJECTS": "1",  # refs/replace/* would show other commits in place of the real ones
           "GIT_PAGER": "cat", "GIT_ASKPASS": "/bin/false", "GIT_CONFIG_COUNT": str(len(_FORCED)),
           **{f"GIT_CONFIG_{kind}_{i}": pair[j] for i, pair in enumerate(_FORCED)
              for j, kind in enumerate(("KEY", "VALUE"))}}

_HEADER = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)\s*(?:"((?:[^"\\\n]|\\.)*)"\s*)?\]\s*(.*)$')
_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=|$|[#;])")


def _denied(section: str, sub: str | None, key: str) -> bool:
    head = section.lower()
    if head not in ALLOWED_SECTIONS:
        return True
    name = f"{head}.{key.lower()}"
    return name in DENIED or (sub is not None and f"{head}.*.{key.lower()}" in DENIED)


def sanitize_config(text: str) -> tuple[str, list[str]]:
    """The configuration with every key not allowed removed; returns it and the dropped keys that run a
    program ("section[.sub].key"). Lines it cannot read are dropped too (git refuses such a file anyway)."""
    out: list[str] = []
    dropped: list[str] = []
    section, sub, keep, continued = None, None, False, False
    for raw in text.splitlines():
        line = raw
        if continued:  # a value continued from the line before goes with its key
            continued = keep and line.rstrip().endswith("\\")
            if keep:
                out.append(line)
            else:
                continued = line.rstrip().endswith("\\")
            continue
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            out.append(line)
            continue
        header = _HEADER.match(line)
        if header:
            name = header.group(1)
            # `[section.sub]` is the old spelling of `[section "sub"]`
            section, sub = (name.split(".", 1)[0], name.split(".", 1)[1]) if "." in name else (name, header.group(2))
            out.append(f"[{section}" + (f' "{sub}"' if sub is not None else "") + "]")
            line = header.group(3)
            if not line.strip() or line.strip()[0] in "#;":
                continue
        key = _KEY.match(line)
        if key is None or section is None:
            continue
        name = f"{section.lower()}." + (f"{sub}." if sub is not None else "") + key.group(1).lower()
        keep = not _denied(section, sub, key.group(1))
        continued = line.rstrip().endswith("\\")
        if keep:
            out.append(line)
        elif RUNS_A_PROGRAM.match(name):
            dropped.append(name)
    return "\n".join(out) + "\n", dropped


def git_dirs(entries: dict[str, tarfile.TarInfo]) -> list[str]:
    """Directories of the archive that git would take for a repository: a HEAD of any kind (git follows a
    linked one) beside a config, objects/, refs/ or a commondir."""
    found = []
    for name in entries:
        path = PurePosixPath(name)
        if path.name != "HEAD":
            continue
        d = str(path.parent) if str(path.parent) != "." else ""
        pre = f"{d}/" if d else ""
        if any(f"{pre}{n}" in entries for n in ("config", "objects", "refs", "commondir")):
            found.append(d)
    return found


FRESH_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
_KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link"}
# Index entry flags (git's read-cache.c): assume-valid in the flags word, skip-worktree in the extended one.
_ASSUME_VALID, _EXTENDED, _SKIP_WORKTREE = 0x8000, 0x4000, 0x4000
# Extensions git cannot read the index without: kept, and the index refused (see clean_index).
_STRUCTURAL = (b"link", b"sdir")


def _kind(m: tarfile.TarInfo) -> str:
    return _KINDS.get(m.type, "not a regular file")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (varint.c: each continuation adds one before shifting), and where it ends."""
    c = data[at]
    value = c & 0x7F
    while c & 0x80:
        at += 1
        c = data[at]
        value = ((value + 1) << 7) | (c & 0x7F)
    return value, at + 1


def clean_index(data: bytes) -> tuple[bytes | None, int, str | None, set[str]]:
    """The index with no entry marked assume-unchanged or skip-worktree (rewritten without its optional
    extensions, which are caches), the number of entries that were marked, why it cannot be used
    (None when it can: then the first value is the index to keep, the same bytes when none was marked), and
    the paths it tracks."""
    names: set[str] = set()
    hash_len = next((n for n, h in ((20, hashlib.sha1), (32, hashlib.sha256))
                     if len(data) > 12 + n and h(data[:-n]).digest() == data[-n:]), 0)
    if data[:4] != b"DIRC" or not hash_len:
        return None, 0, "unreadable", names
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        return None, 0, f"index version {version}", names
    out = bytearray(data[:12])
    pos, marked, end = 12, 0, len(data) - hash_len
    name = b""
    try:
        for _ in range(count):
            fixed = 40 + hash_len
            (flags,) = struct.unpack(">H", data[pos + fixed:pos + fixed + 2])
            head = bytearray(data[pos:pos + fixed + 2])
            at = pos + fixed + 2
            extended = b""
            if flags & _EXTENDED and version >= 3:
                (ext,) = struct.unpack(">H", data[at:at + 2])
                if ext & _SKIP_WORKTREE:
                    marked += 1
                extended = struct.pack(">H", ext & ~_SKIP_WORKTREE)
                at += 2
            if flags & _ASSUME_VALID:
                marked += 1
                head[fixed:fixed + 2] = struct.pack(">H", flags & ~_ASSUME_VALID)
            if version == 4:  # a varint (how much of the previous name to drop), then the rest of the name
                name_start = at
                drop, at = _varint(data, at)
                nul = data.index(b"\0", at)
                name = name[:len(name) - drop] + data[at:nul] if drop <= len(name) else b""
                at = nul + 1
                out += head + extended + data[name_start:at]
            else:  # the name, NUL-padded to a multiple of 8 bytes from the entry's start
                nul = data.index(b"\0", at)
                name = data[at:nul]
                size = (nul - pos + 8) & ~7
                out += head + extended + data[at:pos + size]
                at = pos + size
            names.add(name.decode(errors="surrogateescape"))
            pos = at
        while pos + 8 <= end:  # extensions: signature, size, data
            sig, size = data[pos:pos + 4], struct.unpack(">I", data[pos + 4:pos + 8])[0]
            if sig in _STRUCTURAL:
                return None, marked, f"a {'split' if sig == b'link' else 'sparse'} index", set()
            pos += 8 + size
    except (struct.error, ValueError, IndexError):
        return None, marked, "unreadable", set()
    if pos != end:
        return None, marked, "unreadable", set()
    if not marked:  # (the untracked cache and fsmonitor data are ignored: GIT_ENV turns both off)
        return data, 0, None, names
    algo = hashlib.sha1 if hash_len == 20 else hashlib.sha256
    return bytes(out) + algo(bytes(out)).digest(), marked, None, names


def _rules(text: bytes) -> bool:
    """Whether an ignore file holds any rule (git init's info/exclude holds comments only)."""
    return any(line.strip() and not line.lstrip().startswith(b"#") for line in text.splitlines())


def defuse_git(archive: bytes, shipped: Mapping[str, str] | None = None) -> tuple[bytes, list[str]]:
    """The archive with every repository's configuration sanitized, its hooks removed, its HEAD and config
    regular files, no commondir, an index with no flag hiding changes, no ignore rule the task did not set
    (an info/exclude with rules emptied, a .gitignore no index tracks removed) and no `.git` that is not a
    directory (a `gitdir:` file sends git to another repository); the second value names what was dropped or
    repaired ("path: key (runs a program)", "path (hook)", "path (a symbolic link)", ...). `shipped`: the
    task's own files (path -> text), kept where the archive holds them unchanged."""
    shipped = shipped or {}
    entries = members(archive)
    dirs = git_dirs(entries)
    redirects = [n for n, m in entries.items() if PurePosixPath(n).name == ".git" and not m.isdir()]
    if not dirs and not redirects:
        return archive, []
    tampered: list[str] = []
    replaced: dict[str, bytes] = {}  # regular files whose data changes
    rebuilt: dict[str, bytes] = {}  # members (of any kind) that become regular files with this data
    dropped: list[str] = []
    tracked: set[str] = set()  # paths some repository's index tracks, from the archive's root

    def theirs(name: str) -> bool:  # the task shipped this file as it stands
        m = entries[name]
        return name in shipped and m.isreg() and read_member(archive, name) == shipped[name].encode()

    for n in redirects:
        if not theirs(n):
            dropped.append(n)
            tampered.append(f"{n} ({_kind(entries[n]) if not entries[n].isreg() else 'a gitdir: file'}: "
                            "git would read another repository)")
    for d in dirs:
        pre = f"{d}/" if d else ""
        head = entries[f"{pre}HEAD"]
        if not head.isreg():
            target = PurePosixPath(head.linkname).as_posix() if head.issym() else ""
            meant = target if target.startswith("refs/") else "refs/heads/main"
            rebuilt[f"{pre}HEAD"] = f"ref: {meant}\n".encode()
            tampered.append(f"{pre}HEAD ({_kind(head)})")
        for cfg in (f"{pre}config", f"{pre}config.worktree"):
            if cfg not in entries:
                continue
            if not entries[cfg].isreg():
                tampered.append(f"{cfg} ({_kind(entries[cfg])})")
                if cfg.endswith("config.worktree"):
                    dropped.append(cfg)
                else:
                    rebuilt[cfg] = FRESH_CONFIG
                continue
            text = (read_member(archive, cfg) or b"").decode(errors="replace")
            clean, keys = sanitize_config(text)
            if clean != text:
                replaced[cfg] = clean.encode()
            tampered += [f"{cfg}: {k} (runs a program)" for k in keys]
        for odd, why in ((f"{pre}commondir", "objects, refs and configuration from another directory"),
                         (f"{pre}info/grafts", "history rewritten for git log")):
            if odd in entries:
                dropped.append(odd)
                tampered.append(f"{odd} ({why})")
        exclude = f"{pre}info/exclude"
        if exclude in entries and not theirs(exclude):
            m = entries[exclude]
            if not m.isreg():
                rebuilt[exclude] = b""
                tampered.append(f"{exclude} ({_kind(m)})")
            elif _rules(read_member(archive, exclude) or b""):
                replaced[exclude] = b""
                tampered.append(f"{exclude} (ignore rules the task did not set: files hidden from git status)")
        index = f"{pre}index"
        if index in entries:
            data = read_member(archive, index) if entries[index].isreg() else None
            clean_data, marked, problem, names = (clean_index(data) if data is not None
                                                  else (None, 0, _kind(entries[index]), set()))
            if PurePosixPath(d).name == ".git" and clean_data is not None:
                top = str(PurePosixPath(d).parent)
                tracked |= {f"{top}/{n}" if top != "." else n for n in names}
            if marked:
                tampered.append(f"{index} ({marked} entries marked assume-unchanged or skip-worktree: "
                                "changes hidden from git status)")
            if clean_data is None:
                dropped.append(index)
                tampered.append(f"{index} ({problem})")
            elif clean_data != data:
                replaced[index] = clean_data
        hook_files = [n for n in entries if n.startswith(f"{pre}hooks/") and not n.endswith(".sample")
                      and entries[n].isreg()]
        tampered += [f"{n} (hook)" for n in hook_files]
        dropped += hook_files
    if dirs:  # an ignore file no index tracks hides what it names, itself included, from `git status`
        worktrees = {str(PurePosixPath(d).parent) for d in dirs if PurePosixPath(d).name == ".git"}
        for n in entries:
            path = PurePosixPath(n)
            if path.name != ".gitignore" or n in tracked or theirs(n):
                continue
            if any(w == "." or n.startswith(f"{w}/") for w in worktrees):
                dropped.append(n)
                tampered.append(f"{n} (an ignore file git does not track: it hides files from git status)")
    if dropped:
        archive = without(archive, dropped)
    if replaced:
        archive = replace_members(archive, replaced)
    if rebuilt:
        archive = substitute(archive, rebuilt)
    return archive, tampered
