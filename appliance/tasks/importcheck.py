"""The check of an imported task (`appliance.tasks.importing`): this file's source *is* its verifier.

The importer embeds this module's text, followed by one call of `main` with what the gold command did
(its output, the workspace it left), as the task's Python verifier. So it imports only the standard
library, reads nothing but /workspace and $ANSWER_FILE, and never changes either. The host imports the
same functions to test them and, at import, to record the gold command's workspace the way the verifier
will see the agent's (`manifest` run in the verdict sandbox over the same prepared archive).

What it checks: the agent's answer against the gold command's output (`same_answer`), when the gold
command printed something; and the workspace: every path under /workspace, its kind and, for a file,
the sha256 of its content and whether it is executable (`manifest`), equal to the gold command's.
Timestamps, owners and write bits are not compared (the verdict makes the workspace read-only).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_FENCE = re.compile(r"^\s*```")


def describe(path: str) -> str:
    """One manifest entry: 'dir', 'link TARGET', 'file SHA256', 'exec SHA256', or why it has no hash."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "link " + os.readlink(path)
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if not stat.S_ISREG(st.st_mode):
        return "special"
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                digest.update(chunk)
    except OSError:
        return "unreadable"
    return ("exec " if st.st_mode & 0o111 else "file ") + digest.hexdigest()


def manifest(root: str) -> dict[str, str]:
    """Every path under root (relative, '/'-separated), links not followed, with `describe`'s entry."""
    out: dict[str, str] = {}
    for top, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(top, name)
            out[os.path.relpath(path, root)] = describe(path)
    return dict(sorted(out.items()))


def _same_token(a: str, b: str) -> bool:
    if a == b:
        return True
    if _NUMBER.fullmatch(a) and _NUMBER.fullmatch(b):
        return float(a) == float(b)
    return False


def _candidates(said: str) -> list[str]:
    """What in the agent's message may be its answer: all of it, all of it without code-fence lines, or
    its last non-empty line (an answer after a sentence of explanation)."""
    lines = said.splitlines()
    unfenced = "\n".join(line for line in lines if not _FENCE.match(line))
    filled = [line for line in lines if line.strip() and not _FENCE.match(line)]
    return [said, unfenced] + filled[-1:]


def same_answer(said: str, printed: str) -> bool:
    """The agent's answer equals the gold command's output, whitespace normalised (runs of spaces, tabs and
    newlines count as one) and numbers compared as numbers ('3' = '3.0' = ' 3\\n')."""
    want = printed.split()
    for candidate in _candidates(said):
        got = candidate.split()
        if len(got) == len(want) and all(_same_token(g, w) for g, w in zip(got, want)):
            return True
    return False


def problems(expected: dict[str, object], root: str, said: str) -> list[str]:
    """What differs from the gold command's result; empty when the task is solved."""
    found: list[str] = []
    printed = expected.get("answer")
    if isinstance(printed, str) and not same_answer(said, printed):
        shown = said.strip()[:200] or "nothing"
        found.append(f"the answer ({shown!r}) is not what the task asked for")
    want = expected.get("manifest")
    have = manifest(root)
    if isinstance(want, dict):
        for label, paths in (("missing", [p for p in want if p not in have]),
                             ("unexpected", [p for p in have if p not in want]),
                             ("different", [p for p in want if p in have and have[p] != want[p]])):
            if paths:
                more = f" and {len(paths) - 10} more" if len(paths) > 10 else ""
                found.append(f"{label} in the workspace: {', '.join(paths[:10])}{more}")
    return found


def main(expected_json: str) -> None:
    """The verifier's entry point: exit 0 when the answer and the workspace match, else 1 with the reasons."""
    expected = json.loads(expected_json)
    answer_file = os.environ.get("ANSWER_FILE")
    said = ""
    if answer_file and os.path.exists(answer_file):
        with open(answer_file, encoding="utf-8", errors="replace") as f:
            said = f.read()
    found = problems(expected, "/workspace", said)
    for line in found:
        print(line)
    sys.exit(1 if found else 0)
