"""Git: init, commit, branch, revert, merge with a conflict. Setup builds the history in the workspace."""

from __future__ import annotations

import random

from appliance.tasks.families._common import NAMES, WORDS, make, pick, q, spelled_out
from appliance.tasks.format import TaskSpec

FAMILY = "git"
DESCRIPTION = "git operations: init, commit, branch, revert, merge"

# The repo carries its own identity so commits work in a fresh sandbox with an empty $HOME.
REPO = ("git init -q -b main\ngit config user.name agent\ngit config user.email agent@example.com\n"
        "git config commit.gpgsign false\n")

# The verifier's workspace copy may belong to another uid than the verifier: git would refuse it as
# "dubious ownership" without a safe.directory entry in a global config of our own.
GIT_PRELUDE = """
import tempfile
_home = tempfile.mkdtemp()
with open(os.path.join(_home, ".gitconfig"), "w") as _f:
    _f.write("[safe]\\n\\tdirectory = *\\n")
GENV = dict(os.environ, HOME=_home, GIT_CONFIG_NOSYSTEM="1")
def git(*args):
    r = run(["git", *args], env=GENV)
    return r.stdout.strip() if r.returncode == 0 else None
"""


def generate(level: int, rng: random.Random) -> TaskSpec:
    return [_l1, _l2, _l3, _l4, _l5][level - 1](rng)


def _commit(msg: str) -> str:
    return f"git add -A\ngit commit -q -m {q(msg)}\n"


def _l1(rng: random.Random) -> TaskSpec:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    if rng.random() < 0.3:
        cmd = "git init"
        check = "check(os.path.isdir('.git') and git('rev-parse', '--git-dir') == '.git', 'a git repository should exist here')"
        return make(FAMILY, 1, "init", instruction=spelled_out(cmd), files={f"{name}.txt": f"{word}\n"},
                    verify=GIT_PRELUDE + check, solution=cmd)
    cmd = f'git add {name}.txt && git commit -m "add {name}"'
    files = {"README.md": "project\n", f"{name}.txt": f"{word}\n"}
    setup = REPO + "git add README.md\ngit commit -q -m start\n"
    check = (f"check(git('log', '-1', '--format=%s') == 'add {name}', 'the last commit message should be \"add {name}\"')\n"
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
    check = (f"check(git('show', '{branch}:{name}.txt') == {word!r}, 'branch {branch} should have {name}.txt = {word}')\n"
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
