"""Finding files: by name, size, age, emptiness, contents (every level is table-driven; see _ops.py)."""

from __future__ import annotations

import random

from appliance.tasks.families._ops import (
    STEMS,
    Case,
    Ctx,
    generate_family,
    gone,
    lines_is,
    number_is,
    op,
    q,
    sentence,
)
from appliance.tasks.format import TaskSpec

FAMILY = "find"
DESCRIPTION = "find files by name, size, age, emptiness and contents"
FIND = "GNU findutils: find"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)


def _tree(c: Ctx, exts: list[str], n: int = 8) -> tuple[str, dict[str, str]]:
    root = c.pick(["project", "home", "srv", "workspace_data", "repo"])
    dirs = ["", "a/", "a/b/", "logs/", "misc/old/"]
    files: dict[str, str] = {}
    while len(files) < n:
        files[f"{root}/{c.pick(dirs)}{c.pick(STEMS)}.{c.pick(exts)}"] = f"{sentence(c.rng)}\n"
    return root, files


@op("find", "find-by-name", (1, 2, 3), f"{FIND} -name", "find -name", [
    "List every .{ext} file under {root}/ (all subdirectories too), one path per line, sorted, into {out}.",
    "Find all files named *.{ext} anywhere below {root} and write their paths (like {root}/x/y.{ext}), sorted, "
    "to {out}.",
    "{out} should hold the sorted paths of the .{ext} files in the {root} tree.",
    "Where are the .{ext} files in {root}/? Sorted paths into {out}.",
], traps=("missing-dir",))
def _name(c: Ctx) -> Case:
    root, files = _tree(c, ["txt", "log", "md", "csv"])
    ext = next(p.rsplit(".", 1)[1] for p in files)
    out = c.out("found.txt")
    return Case(files, lines_is(out, sorted(p for p in files if p.endswith("." + ext))),
                f"find {root} -name '*.{ext}' | sort > {q(out)}", dict(root=root, ext=ext, out=out))


@op("find", "find-empty-delete", (2, 3, 4), f"{FIND} -empty -delete", "find -empty", [
    "Delete all empty files under {root}/ (in every subdirectory). Files with content stay.",
    "Some files in the {root} tree are empty (0 bytes). Remove exactly those.",
    "Clean {root}/ of zero-length files, recursively.",
    "Find the empty regular files below {root} and delete them.",
])
def _empty(c: Ctx) -> Case:
    root, files = _tree(c, ["txt", "log", "cfg"])
    empty = c.pick(sorted(files), 3)
    for p in empty:
        files[p] = ""
    verify = "\n".join([gone(p) for p in empty] + [lines_is(p, [t.strip()]) for p, t in files.items() if t])
    return Case(files, verify, f"find {root} -type f -empty -delete", dict(root=root))


@op("find", "find-old-delete", (3, 4), f"{FIND} -mtime", "find -mtime", [
    "Delete the files under {root}/ that were last modified more than {days} days ago; keep newer ones.",
    "Old files (not changed in over {days} days) in the {root} tree should be removed.",
    "Purge everything below {root} whose modification time is older than {days} days.",
    "Clean out stale files: remove files in {root}/ untouched for more than {days} days.",
])
def _old(c: Ctx) -> Case:
    root, files = _tree(c, ["log", "tmp", "txt"])
    old = c.pick(sorted(files), 3)
    days = c.pick([7, 30, 90])
    setup = "".join(f"touch -d '2001-0{c.rng.randint(1, 9)}-1{c.rng.randint(0, 9)}' {q(p)}\n" for p in old)
    verify = "\n".join([gone(p) for p in old] + [lines_is(p, [t.strip()]) for p, t in files.items() if p not in old])
    return Case(files, verify, f"find {root} -type f -mtime +{days} -delete", dict(root=root, days=str(days)),
                setup=setup)


@op("find", "find-large", (2, 3, 4), f"{FIND} -size", "find -size", [
    "List the files under {root}/ that are larger than {k} kilobytes, sorted, one per line, in {out}.",
    "Which files in the {root} tree exceed {k}k in size? Write their paths (sorted) into {out}.",
    "{out} should name every file below {root} bigger than {k} KiB, in sorted order.",
    "Find big files (over {k} KiB) in {root}/; save the sorted paths as {out}.",
], traps=("missing-dir",))
def _large(c: Ctx) -> Case:
    root, files = _tree(c, ["bin", "dat", "txt"])
    big = sorted(c.pick(sorted(files), 2))
    k = c.pick([10, 20, 50])
    setup = "".join(f"head -c {k * 1024 + c.rng.randint(100, 5000)} /dev/zero > {q(p)}\n" for p in big)
    out = c.out("big.txt")
    return Case(files, lines_is(out, big), f"find {root} -type f -size +{k}k | sort > {q(out)}",
                dict(root=root, k=str(k), out=out), setup=setup)


@op("find", "count-dirs", (2, 3, 4), f"{FIND} -type d", "find -type d", [
    "How many directories are inside {root}/ (at any depth, not counting {root} itself)? Write the number to {out}.",
    "Count the subdirectories of {root}, recursively, into {out}.",
    "{out} should hold the number of directories below {root} (excluding {root}).",
    "Write the total count of folders nested in {root}/ to {out}.",
])
def _dirs(c: Ctx) -> Case:
    root, files = _tree(c, ["txt"])
    dirs = {p.rsplit("/", 1)[0] for p in files}
    allds = set()
    for d in dirs:
        parts = d.split("/")
        for i in range(2, len(parts) + 1):
            allds.add("/".join(parts[:i]))
    return Case(files, number_is("dirs.txt", len(allds)), f"find {root} -mindepth 1 -type d | wc -l > dirs.txt",
                dict(root=root, out="dirs.txt"))


@op("find", "find-exec-chmod", (3, 4), f"{FIND} -exec", "find -exec", [
    "Make every .sh file under {root}/ executable (subdirectories too); other files stay as they are.",
    "All shell scripts (*.sh) in the {root} tree need the execute bit.",
    "Recursively chmod +x the .sh files below {root}.",
    "Give execute permission to each *.sh file anywhere under {root}/.",
])
def _exec(c: Ctx) -> Case:
    root, files = _tree(c, ["txt", "sh"])
    scripts = [p for p in files if p.endswith(".sh")] or [next(iter(files)).rsplit(".", 1)[0] + "x.sh"]
    for p in scripts:
        files[p] = "#!/bin/sh\necho ok\n"
    others = [p for p in files if not p.endswith(".sh")]
    verify = "\n".join([f"check(os.access({p!r}, os.X_OK), '{p} should be executable')" for p in scripts]
                       + [f"check(not os.access({p!r}, os.X_OK), '{p} should not be executable')" for p in others])
    return Case(files, verify, f"find {root} -name '*.sh' -exec chmod +x {{}} +", dict(root=root))


@op("find", "grep-files-with", (2, 3, 4), "GNU grep: -rl", "grep -rl", [
    "Which files under {root}/ mention {word}? Write their paths, sorted, one per line, to {out}.",
    "List (sorted) the files anywhere in {root} whose contents contain {word}; save to {out}.",
    "{out} should name every file below {root} that contains the text {word}.",
    "Search the {root} tree for {word} and record the matching file paths in {out}, sorted.",
], traps=("missing-dir",))
def _grep_l(c: Ctx) -> Case:
    root, files = _tree(c, ["txt", "md", "cfg"])
    word = c.pick(["TODO", "FIXME", "deprecated", "password"])
    hits = sorted(c.pick(sorted(files), 3))
    for p in hits:
        files[p] = files[p].rstrip("\n") + f" {word}: check this\n"
    out = c.out("matches.txt")
    return Case(files, lines_is(out, hits), f"grep -rl {word} {root} | sort > {q(out)}",
                dict(root=root, word=word, out=out))
