"""Git in a verifier runs no program the agent configured.

Git verifiers run `git status`, `git log`, `git show` in the agent's repository, and a repository's own
configuration applies to them: `core.fsmonitor` names a program git runs on `status`; so do hooks,
`diff.external`, textconv and filter drivers, pagers, `gpg.program` with `log.showSignature`, aliases,
credential helpers. Before a workspace reaches a verifier, `defuse_git` rewrites the configuration of
every git directory in its archive (`<dir>/config`, `<dir>/config.worktree`) keeping only keys of
sections on ALLOWED_SECTIONS minus the keys on DENIED (an allowlist, so an option this list does not
know is dropped, not run), drops includes (they could pull the same keys from any file) and hooks, and
names every dropped key that would run a program as tampering. `GIT_ENV` is the verifier's environment
half: no system or global configuration, and the same keys forced off from the command-line scope,
which outranks the repository's.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import PurePosixPath

from appliance.sandbox.transfer import members, read_member, replace_members, without

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
           ("log.showSignature", "false"), ("safe.directory", "*"))
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
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
    """Directories of the archive that git would take for a repository (HEAD, config, objects/ or refs/)."""
    found = []
    for name, m in entries.items():
        path = PurePosixPath(name)
        if path.name != "HEAD" or not m.isreg():
            continue
        d = str(path.parent) if str(path.parent) != "." else ""
        pre = f"{d}/" if d else ""
        if f"{pre}config" in entries and (f"{pre}objects" in entries or f"{pre}refs" in entries):
            found.append(d)
    return found


def defuse_git(archive: bytes) -> tuple[bytes, list[str]]:
    """The archive with every repository's configuration sanitized and its hooks removed; the second value
    names what was dropped as "path: key (runs a program)" and "path (hook)"."""
    entries = members(archive)
    dirs = git_dirs(entries)
    if not dirs:
        return archive, []
    tampered: list[str] = []
    replaced: dict[str, bytes] = {}
    hooks: list[str] = []
    for d in dirs:
        pre = f"{d}/" if d else ""
        for cfg in (f"{pre}config", f"{pre}config.worktree"):
            if cfg in entries and entries[cfg].isreg():
                text = (read_member(archive, cfg) or b"").decode(errors="replace")
                clean, dropped = sanitize_config(text)
                if clean != text:
                    replaced[cfg] = clean.encode()
                tampered += [f"{cfg}: {k} (runs a program)" for k in dropped]
        hook_files = [n for n in entries if n.startswith(f"{pre}hooks/") and not n.endswith(".sample")
                      and entries[n].isreg()]
        tampered += [f"{n} (hook)" for n in hook_files]
        hooks += hook_files
    if hooks:
        archive = without(archive, hooks)
    if replaced:
        archive = replace_members(archive, replaced)
    return archive, tampered
