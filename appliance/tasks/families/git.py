"""Git: init, commit, branch, revert, merge with a conflict. Setup builds the history in the workspace.

The operations beyond the basics (amend with a forgotten file, revert or cherry-pick one commit, find the
commit that introduced a string, restore a file as of an older commit) are in _git_ops_history.py."""

from __future__ import annotations

import random

from appliance.tasks.families import _git_ops_history  # noqa: F401  (register the history operations)
from appliance.tasks.families._common import NAMES, WORDS, make, pick, q, spelled_out
from appliance.tasks.families._git_common import GIT_PRELUDE, REPO
from appliance.tasks.families._git_common import commit as _commit
from appliance.tasks.families._ops import Case, Ctx, generate_family, op
from appliance.tasks.format import TaskSpec

FAMILY = "git"
DESCRIPTION = ("git operations: init, commit, branch, merge; amend, revert or cherry-pick one commit, find the "
               "commit that introduced a string, restore a file from history")


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _l1(rng: random.Random) -> TaskSpec:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    if rng.random() < 0.3:
        cmd = "git init"
        check = ("check(os.path.isdir('.git') and git('rev-parse', '--git-dir') == '.git', "
                 "'a git repository should exist here')")
        return make(FAMILY, 1, "init", instruction=spelled_out(cmd), files={f"{name}.txt": f"{word}\n"},
                    verify=GIT_PRELUDE + check, solution=cmd)
    cmd = f'git add {name}.txt && git commit -m "add {name}"'
    files = {"README.md": "project\n", f"{name}.txt": f"{word}\n"}
    setup = REPO + "git add README.md\ngit commit -q -m start\n"
    check = (f"check(git('log', '-1', '--format=%s') == 'add {name}', "
             f"'the last commit message should be \"add {name}\"')\n"
             f"check(git('show', 'HEAD:{name}.txt') == {word!r}, '{name}.txt should be in the last commit')")
    return make(FAMILY, 1, "commit", instruction=spelled_out(cmd), files=files, setup=setup,
                verify=GIT_PRELUDE + check, solution=cmd)


def _l2(rng: random.Random) -> TaskSpec:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    msg = f"{rng.choice(['add', 'save', 'record'])} {name}"
    files = {"README.md": "project\n", f"{name}.txt": f"{word}\n"}
    setup = REPO + "git add README.md\ngit commit -q -m start\n"
    instruction = f"This is a git repository. Commit the file {name}.txt with the commit message: {msg}"
    solution = f"git add {name}.txt\ngit commit -m {q(msg)}"
    check = (f"check(git('log', '-1', '--format=%s') == {msg!r}, 'the last commit message should be ' + {msg!r})\n"
             f"check(git('show', 'HEAD:{name}.txt') == {word!r}, '{name}.txt should be in the last commit')")
    return make(FAMILY, 2, "commit", instruction=instruction, files=files, setup=setup,
                verify=GIT_PRELUDE + check, solution=solution)


def _l3(rng: random.Random) -> TaskSpec:
    branch = f"{rng.choice(['feature', 'fix', 'topic'])}-{rng.choice(WORDS)}"
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    files = {"README.md": f"{rng.choice(WORDS)}\n"}
    setup = REPO + _commit("start")
    instruction = (f"In this git repository, create a branch named {branch}, switch to it, and commit a new file "
                   f"{name}.txt containing {word} on that branch. The main branch must not change.")
    solution = f"git checkout -b {branch}\necho {word} > {name}.txt\ngit add {name}.txt\ngit commit -m 'add {name}'"
    check = (f"check(git('show', '{branch}:{name}.txt') == {word!r}, "
             f"'branch {branch} should have {name}.txt = {word}')\n"
             "check(git('rev-list', '--count', 'main') == '1', 'main should still have exactly one commit')\n"
             f"check(git('rev-list', '--count', '{branch}') == '2', '{branch} should have one commit more than main')")
    return make(FAMILY, 3, "branch", instruction=instruction, files=files, setup=setup,
                verify=GIT_PRELUDE + check, solution=solution)


def _l4(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    good, bad = pick(rng, WORDS, 2)
    files = {f"{name}.txt": f"{good}\n"}
    setup = REPO + _commit(f"add {name}") + f"echo {bad} > {name}.txt\n" + _commit(f"change {name}")
    instruction = (f"The last commit of this git repository changed {name}.txt by mistake. Undo that change with "
                   "a new commit that reverts it (keep the history; do not delete commits).")
    solution = "git revert --no-edit HEAD"
    check = (f"check(git('rev-list', '--count', 'HEAD') == '3', 'there should be 3 commits (the revert is new)')\n"
             f"check(git('show', 'HEAD:{name}.txt') == {good!r}, '{name}.txt should be back to {good} in HEAD')\n"
             f"text_is({name + '.txt'!r}, {good!r})\n"
             "check(git('status', '--porcelain') == '', 'the working tree should be clean')")
    return make(FAMILY, 4, "revert", instruction=instruction, files=files, setup=setup,
                verify=GIT_PRELUDE + check, solution=solution)


def _l5(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    base, ours, theirs = pick(rng, WORDS, 3)
    branch = f"feature-{rng.choice(WORDS)}"
    files = {f"{name}.txt": f"{base}\n"}
    setup = (REPO + _commit("start") + f"git checkout -q -b {branch}\necho {theirs} > {name}.txt\n"
             + _commit(f"{theirs} on {branch}") + f"git checkout -q main\necho {ours} > {name}.txt\n"
             + _commit(f"{ours} on main"))
    instruction = (f"Merge the branch {branch} into main in this git repository. The merge conflicts in "
                   f"{name}.txt: resolve it so the file has two lines, main's line ({ours}) first and then "
                   f"{branch}'s line ({theirs}). Finish the merge with a merge commit.")
    solution = (f"git merge {branch} || true\nprintf '%s\\n' {ours} {theirs} > {name}.txt\n"
                f"git add {name}.txt\ngit commit --no-edit")
    check = ("parents = (git('rev-list', '--parents', '-n', '1', 'HEAD') or '').split()\n"
             "check(len(parents) == 3, 'HEAD should be a merge commit with two parents')\n"
             f"check(git('show', 'HEAD:{name}.txt') == {ours + chr(10) + theirs!r}, "
             f"'{name}.txt in HEAD should be {ours} then {theirs}')\n"
             "check(git('rev-parse', '--abbrev-ref', 'HEAD') == 'main', 'main should be checked out')\n"
             "check(git('status', '--porcelain') == '', 'the working tree should be clean')")
    return make(FAMILY, 5, "merge", instruction=instruction, files=files, setup=setup,
                verify=GIT_PRELUDE + check, solution=solution)


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
GITDOC = "git: everyday commands (giteveryday)"


def _repo(c: Ctx, commits: int = 2) -> tuple[dict[str, str], str, list[str]]:
    """A repository with `commits` commits, each changing one file; returns (files, setup, messages)."""
    name = c.pick(NAMES)
    files = {"README.md": f"# {c.pick(WORDS)} project\n", f"{name}.txt": f"{c.pick(WORDS)}\n"}
    msgs = ["Initial commit"] + [c.pick(["Fix typo in", "Update", "Tweak", "Rework"]) + f" {name}.txt (#{i})"
                                 for i in range(1, commits)]
    setup = REPO + _commit(msgs[0])
    for m in msgs[1:]:
        setup += f"echo {q(c.pick(WORDS))} >> {name}.txt\n" + _commit(m)
    return files, setup, msgs


@op("git", "git-tag", (1, 2, 3), f"{GITDOC}: git tag", "git tag", [
    "Tag the current commit of this repository as {tag}.",
    "Mark HEAD with the git tag {tag}.",
    "Create a tag named {tag} pointing at the latest commit.",
    "Release time: add the tag {tag} to the commit that is checked out.",
], traps=("subdir",))
def _tag(c: Ctx) -> Case:
    files, setup, _ = _repo(c)
    tag = f"v{c.rng.randint(0, 3)}.{c.rng.randint(0, 20)}.{c.rng.randint(0, 9)}"
    verify = GIT_PRELUDE + (f"check(git('rev-parse', '{tag}^{{commit}}') == git('rev-parse', 'HEAD') != None, "
                            f"'tag {tag} should point at HEAD')")
    return Case(files, verify, f"git tag {tag}", dict(tag=tag), setup=setup)


@op("git", "git-count-commits", (2, 3, 4), f"{GITDOC}: git rev-list --count", "git rev-list", [
    "Write the number of commits on the current branch into {out}.",
    "How many commits does this repository's history have? Save the number in {out}.",
    "{out} should contain the commit count of HEAD.",
    "Count the commits reachable from HEAD and put the count in {out}.",
], traps=("subdir",))
def _count(c: Ctx) -> Case:
    files, setup, msgs = _repo(c, c.rng.randint(2, 6))
    out = c.pick(["commits.txt", "count.txt"])
    verify = GIT_PRELUDE + f"check((read({out!r}) or '').strip() == '{len(msgs)}', '{out} should hold {len(msgs)}')"
    return Case(files, verify, f"git rev-list --count HEAD > {out}", dict(out=out), setup=setup)


@op("git", "git-discard-changes", (2, 3, 4), f"{GITDOC}: git restore / checkout --", "git restore", [
    "{src} has uncommitted edits that are wrong. Throw them away so it matches the last commit again.",
    "Discard the local changes to {src} (restore it from HEAD).",
    "Revert the working-tree modifications of {src}; do not make a commit.",
    "Undo my uncommitted edits in {src}.",
], traps=("subdir",))
def _restore(c: Ctx) -> Case:
    files, setup, _ = _repo(c)
    src = next(p for p in files if p != "README.md")
    setup += f"echo 'broken edit, do not keep' >> {src}\n"
    verify = GIT_PRELUDE + ("check(git('status', '--porcelain') == '', 'the working tree should be clean')\n"
                            "check(git('rev-list', '--count', 'HEAD') == '2', 'no new commit')")
    return Case(files, verify, f"git checkout -- {src}", dict(src=src), setup=setup)


@op("git", "git-amend-message", (2, 3, 4), f"{GITDOC}: git commit --amend", "git commit --amend", [
    "The last commit's message has a typo. Change it to: {msg}",
    "Reword the most recent commit so its message is \"{msg}\" (do not add a new commit).",
    "Amend HEAD's commit message to {msg}.",
    "Fix the last commit message; it should read: {msg}",
], traps=("subdir",))
def _amend(c: Ctx) -> Case:
    files, setup, msgs = _repo(c)
    msg = msgs[-1].replace("Update", "Update the").replace("Fix typo in", "Fix a typo in") + " properly"
    verify = GIT_PRELUDE + (f"check(git('log', '-1', '--format=%s') == {msg!r}, "
                            f"'the last message should be ' + {msg!r})\n"
                            "check(git('rev-list', '--count', 'HEAD') == '2', 'still two commits')")
    return Case(files, verify, f"git commit --amend -m {q(msg)}", dict(msg=msg), setup=setup)


@op("git", "git-rename-branch", (2, 3, 4), f"{GITDOC}: git branch -m", "git branch -m", [
    "Rename the branch {old} to {new}.",
    "The branch called {old} should be called {new} from now on.",
    "Change the name of branch {old} to {new}; the commits stay the same.",
    "Move branch {old} to the new name {new}.",
], traps=("subdir",))
def _rename(c: Ctx) -> Case:
    files, setup, _ = _repo(c)
    old, new = f"feature-{c.pick(WORDS)}", f"topic/{c.pick(WORDS)}-{c.rng.randint(10, 99)}"
    setup += f"git branch {old}\n"
    verify = GIT_PRELUDE + (f"check(git('rev-parse', '--verify', '-q', 'refs/heads/{new}') "
                            f"== git('rev-parse', 'HEAD'), 'branch {new} should exist at HEAD')\n"
                            f"check(git('rev-parse', '--verify', '-q', 'refs/heads/{old}') is None, "
                            f"'{old} should be gone')")
    return Case(files, verify, f"git branch -m {old} {new}", dict(old=old, new=new), setup=setup)


@op("git", "git-show-old-version", (3, 4), f"{GITDOC}: git show REV:path", "git show", [
    "Write the contents {src} had in the first commit into {out} (do not change {src} itself).",
    "Save the original version of {src}, as it was committed initially, to {out}.",
    "{out} should be {src} as of the repository's first commit.",
    "Recover the first committed version of {src} into {out}.",
], traps=("subdir",))
def _show(c: Ctx) -> Case:
    files, setup, msgs = _repo(c, c.rng.randint(2, 4))
    src = next(p for p in files if p != "README.md")
    out = c.pick(["original.txt", "first.txt", "old_version.txt"])
    verify = GIT_PRELUDE + f"text_is({out!r}, {files[src]!r})"
    return Case(files, verify, f"git show $(git rev-list --max-parents=0 HEAD):{src} > {out}",
                dict(src=src, out=out), setup=setup)


@op("git", "git-unstage", (3, 4), f"{GITDOC}: git restore --staged / git reset", "git restore --staged", [
    "{src} was staged by mistake. Unstage it, but keep the edit in the working tree.",
    "Take {src} out of the index without losing my changes to it.",
    "Nothing should be staged for commit, yet the changes in {src} must remain in the file.",
    "Undo `git add {src}` (keep the modified file).",
], traps=("subdir",), heldout=True)
def _unstage(c: Ctx) -> Case:
    files, setup, _ = _repo(c)
    src = next(p for p in files if p != "README.md")
    setup += f"echo 'work in progress' >> {src}\ngit add {src}\n"
    verify = GIT_PRELUDE + ("check(git('diff', '--cached', '--name-only') == '', 'nothing should be staged')\n"
                            f"check(git('diff', '--name-only') == {src!r}, '{src} should still be modified')")
    return Case(files, verify, f"git reset -q HEAD {src}", dict(src=src), setup=setup)


@op("git", "git-ignore", (3, 4), "gitignore(5)", ".gitignore", [
    "Make git ignore all .{ext} files in this repository, and commit that rule.",
    "Add a .gitignore entry so *.{ext} files never show up as untracked; commit the .gitignore.",
    "The .{ext} files keep appearing in `git status`. Ignore them via .gitignore and commit it.",
    "Commit a .gitignore that excludes every *.{ext} file.",
], traps=("subdir",))
def _ignore(c: Ctx) -> Case:
    files, setup, _ = _repo(c)
    ext = c.pick(["log", "tmp", "pyc", "bak"])
    files[f"debug.{ext}"] = "noise\n"
    setup = setup.replace("git add -A", "git add " + " ".join(q(p) for p in files if p != f"debug.{ext}"))
    verify = GIT_PRELUDE + ("check(git('status', '--porcelain') == '', "
                            f"'git status should be clean (debug.{ext} ignored)')\n"
                            f"check(git('check-ignore', 'x.{ext}') == 'x.{ext}', '*.{ext} should be ignored')\n"
                            "check(git('ls-files', '.gitignore') == '.gitignore', '.gitignore should be committed')")
    return Case(files, verify,
                f"echo '*.{ext}' >> .gitignore && git add .gitignore && git commit -q -m 'Ignore {ext} files'",
                dict(ext=ext), setup=setup)
