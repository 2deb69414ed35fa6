"""Issue 27: git in a verifier runs no program the agent configured in its repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.sandbox.transfer import members, pack_files, read_member
from appliance.tasks import TaskSpec, verify_workspace
from appliance.tasks.gitsafe import defuse_git, sanitize_config
from appliance.tasks.verify import VerifyResult


def verdict_after(settings: Settings, tmp_path: Path, spec: TaskSpec, agent: str) -> VerifyResult:
    """The verifier's verdict on what `agent` (a shell script, which must succeed in its own sandbox) left."""
    from appliance.sandbox import Sandbox

    ws = tmp_path / "ws"
    ws.mkdir()
    with Sandbox.start(settings, workspace=ws) as sb:
        made = sb.exec(agent)
        assert made.exit_code == 0, made.stderr  # what the agent did works in its own sandbox
    return verify_workspace(settings, spec, ws, archive=sb.copied_out)

# Every key the issue names, and the rest of the program-running family, one by one.
PROGRAM_KEYS = [
    ("core", None, "fsmonitor"), ("core", None, "hooksPath"), ("core", None, "pager"), ("core", None, "editor"),
    ("core", None, "sshCommand"), ("core", None, "askPass"), ("diff", None, "external"), ("diff", "x", "textconv"),
    ("diff", "x", "command"), ("gpg", None, "program"), ("gpg", "ssh", "program"), ("log", None, "showSignature"),
    ("alias", None, "st"), ("pager", None, "log"), ("filter", "x", "clean"), ("filter", "x", "smudge"),
    ("filter", "x", "process"), ("credential", None, "helper"), ("include", None, "path"),
    ("includeIf", "gitdir:/", "path"), ("sequence", None, "editor"), ("merge", "x", "driver"),
    ("remote", "origin", "uploadpack"), ("submodule", "x", "update"), ("interactive", None, "diffFilter"),
]


@pytest.mark.parametrize("section, sub, key", PROGRAM_KEYS)
def test_each_program_key_is_dropped_and_named(section: str, sub: str | None, key: str) -> None:
    head = f'[{section} "{sub}"]' if sub else f"[{section}]"
    text = f"[core]\n\tbare = false\n{head}\n\t{key} = /workspace/evil.sh\n[user]\n\tname = agent\n"
    clean, dropped = sanitize_config(text)
    name = f"{section.lower()}." + (f"{sub}." if sub else "") + key.lower()
    assert "evil" not in clean, clean
    assert dropped == [name]
    assert "name = agent" in clean and "bare = false" in clean


def test_odd_spellings_do_not_smuggle_a_key_through() -> None:
    text = ('[core] fsmonitor = /evil\n[diff.x] textconv = 1\n[ALIAS]\n\tst = !evil\n'
            '[diff "y"]\n\ttextconv = a \\\n b\n'
            "[remote \"o\"]\n\turl = /r\n")
    clean, dropped = sanitize_config(text)
    assert "evil" not in clean and "textconv" not in clean and " b" not in clean, clean
    assert "url = /r" in clean
    assert {"core.fsmonitor", "alias.st", "diff.x.textconv", "diff.y.textconv"} <= set(dropped)


def test_hooks_are_removed_from_every_repository_in_the_archive() -> None:
    archive = pack_files({"repo/.git/HEAD": "ref: refs/heads/main\n", "repo/.git/config": "[core]\n\tfsmonitor = x\n",
                          "repo/.git/refs/heads/.keep": "", "repo/.git/hooks/post-checkout": "#!/bin/sh\n",
                          "repo/.git/hooks/pre-commit.sample": "", "bare.git/HEAD": "ref: refs/heads/main\n",
                          "bare.git/config": "[alias]\n\tx = !y\n", "bare.git/objects/.keep": "", "a.txt": "a\n"})
    defused, tampered = defuse_git(archive)
    names = members(defused)
    assert "repo/.git/hooks/post-checkout" not in names and "repo/.git/hooks/pre-commit.sample" in names
    assert b"fsmonitor" not in (read_member(defused, "repo/.git/config") or b"")
    assert b"alias" in (read_member(defused, "bare.git/config") or b"") and b"!y" not in (
        read_member(defused, "bare.git/config") or b"")
    assert sorted(tampered) == ["bare.git/config: alias.x (runs a program)", "repo/.git/config: core.fsmonitor "
                                "(runs a program)", "repo/.git/hooks/post-checkout (hook)"]


# --- in real sandboxes: the verifier runs the git command; it "passes" only if the planted program ran ---
REPO = ("mkdir repo && cd repo && git init -q -b main && git config user.name a && git config user.email a@b\n"
        "echo v1 > a.txt && git add a.txt && git commit -qm one && echo v2 > a.txt\n"
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\ncat\\n' > /workspace/evil.sh && chmod +x /workspace/evil.sh\n")
SIGNED = ("tree=$(git write-tree)\n"  # a commit object with a signature header: log.showSignature runs gpg on it
          "printf 'tree %s\\nparent %s\\nauthor a <a@b> 1 +0000\\ncommitter a <a@b> 1 +0000\\ngpgsig -----BEGIN PGP "
          "SIGNATURE-----\\n x\\n -----END PGP SIGNATURE-----\\n\\nsigned\\n' $tree $(git rev-parse HEAD) > /tmp/c\n"
          "git update-ref refs/heads/main $(git hash-object -t commit -w /tmp/c)\n")
CASES = {
    "core.fsmonitor": ("git config core.fsmonitor /workspace/evil.sh", ["status"]),
    "diff.external": ("git config diff.external /workspace/evil.sh", ["diff"]),
    "diff.textconv": ("git config diff.x.textconv /workspace/evil.sh && echo '*.txt diff=x' > .gitattributes",
                      ["diff"]),
    "filter.clean": ("git config filter.x.clean /workspace/evil.sh && echo '*.txt filter=x' > .gitattributes",
                     ["diff"]),
    "include.path": ("printf '[core]\\n\\tfsmonitor = /workspace/evil.sh\\n' > ../inc.cfg && "
                     "git config include.path /workspace/inc.cfg", ["status"]),
    "gpg.program": (SIGNED + "git config gpg.program /workspace/evil.sh && git config log.showSignature true",
                    ["log", "-1"]),
}
VERIFY = ("import os, subprocess, sys\nsubprocess.run(['git', *ARGS], cwd='repo', capture_output=True, timeout=20)\n"
          "sys.exit(0 if os.path.exists('/tmp/pwned') else 1)\n")


@pytest.mark.slow  # real Podman
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_git_program_never_runs_in_the_verifier(sandbox_settings: Settings, tmp_path: Path,
                                                          case: str) -> None:
    configure, args = CASES[case]
    spec = TaskSpec(id=f"git-{case}", family="git", difficulty=3, instruction="x", verify_lang="python",
                    verify=VERIFY.replace("ARGS", repr(args)), solution="true\n")
    # the planted program does run in the agent's own sandbox
    verdict = verdict_after(sandbox_settings, tmp_path, spec,
                            REPO + f"{configure}\ngit {' '.join(args)} >/dev/null 2>&1; test -e /tmp/pwned")
    assert not verdict.passed and verdict.error is None, verdict.output


# Issue 47: layouts that hid the configuration from the sanitizer, each with a planted clean filter that runs
# on `git diff`; the program must not run in the verifier, and the layout is recorded as tampering.
FILTER = "git config filter.x.clean /workspace/evil.sh && echo '*.txt filter=x' > .gitattributes"
LAYOUTS = {
    "config-symlink": (f"{FILTER} && mv .git/config .git/cfg && ln -s cfg .git/config", "repo/.git/config ("),
    "head-symlink": (f"{FILTER} && ln -sf refs/heads/main .git/HEAD", "repo/.git/HEAD ("),
    "commondir": (f"{FILTER} && mkdir ../common && mv .git/config .git/objects .git/refs ../common/ && "
                  "echo ../../common > .git/commondir", "repo/.git/commondir ("),
    # tar stores the newer name of two hard links first: the config becomes a link member to it
    "config-hardlink": (f"{FILTER} && ln .git/config .git/zz", "repo/.git/config ("),
}


@pytest.mark.slow  # real Podman
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_git_layout_that_hides_the_configuration_is_tampering(sandbox_settings: Settings, tmp_path: Path,
                                                                layout: str) -> None:
    configure, recorded = LAYOUTS[layout]
    spec = TaskSpec(id=f"git-{layout}", family="git", difficulty=3, instruction="x", verify_lang="python",
                    verify=VERIFY.replace("ARGS", repr(["diff"])), solution="true\n")
    # the planted program does run in the agent's own sandbox
    verdict = verdict_after(sandbox_settings, tmp_path, spec,
                            REPO + f"{configure}\ngit diff >/dev/null 2>&1; test -e /tmp/pwned")
    assert not verdict.passed and verdict.error is None, verdict.output
    assert any(t.startswith(recorded) for t in verdict.tampered), verdict.tampered


# Issue 47: state hidden from a verifier judged by `git status`, with no flag in the index: ignore rules the
# task never set (an untracked .gitignore that ignores itself, the repository's info/exclude), and a `.git`
# FILE (`gitdir: ...`) that sends git to another repository in which everything is committed.
UNTRACKED = ("mkdir repo && cd repo && git init -q -b main && git config user.name a && git config user.email a@b\n"
             "echo v1 > a.txt && git add a.txt && git commit -qm one && echo new > new.txt\n")
FAKE = "git --git-dir=.f --work-tree=. "
HIDING = {
    "gitignore": ("printf 'new.txt\\n.gitignore\\n' > .gitignore", "repo/.gitignore ("),
    "info-exclude": ("echo new.txt >> .git/info/exclude", "repo/.git/info/exclude ("),
    "gitdir-file": (f"{FAKE}init -q -b main && echo .f >> .f/info/exclude && {FAKE}add -A && "
                    f"{FAKE}-c user.name=a -c user.email=a@b commit -qm x && rm -rf .git && echo 'gitdir: .f' > .git",
                    "repo/.git ("),
}
CLEAN_STATUS = ("import subprocess, sys\n"
                "r = subprocess.run(['git', 'status', '--porcelain'], cwd='repo', capture_output=True, text=True, "
                "timeout=20)\nsys.exit(0 if r.returncode == 0 and r.stdout == '' else 1)\n")


@pytest.mark.slow  # real Podman
@pytest.mark.parametrize("how", sorted(HIDING))
def test_ignore_rules_and_a_gitdir_file_hide_nothing_from_the_verifier(sandbox_settings: Settings, tmp_path: Path,
                                                                      how: str) -> None:
    hide, recorded = HIDING[how]
    spec = TaskSpec(id=f"git-{how}", family="git", difficulty=3, instruction="Commit new.txt.", verify_lang="python",
                    verify=CLEAN_STATUS, solution="git add new.txt && git commit -qm two\n")
    # the agent's own git sees a clean repository
    verdict = verdict_after(sandbox_settings, tmp_path, spec,
                            UNTRACKED + f"{hide}\ntest -z \"$(git status --porcelain)\"")
    assert not verdict.passed and verdict.error is None, verdict.output
    assert any(t.startswith(recorded) for t in verdict.tampered), verdict.tampered


def test_ignore_rules_the_repository_tracks_or_the_task_shipped_are_kept() -> None:
    # a committed .gitignore is the repository's own (its changes show in `git status`); info/exclude as
    # `git init` writes it (comments only) is nobody's doing
    import subprocess

    from appliance.sandbox.transfer import pack_dir

    with __import__("tempfile").TemporaryDirectory() as d:
        subprocess.run("git init -q -b main && printf '*.log\\n' > .gitignore && git add .gitignore && "
                       "mkdir sub && printf 'x\\n' > sub/.gitignore",
                       shell=True, cwd=d, check=True, capture_output=True)
        archive, _ = pack_dir(Path(d))
    defused, tampered = defuse_git(archive, {"sub/.gitignore": "x\n"})
    names = members(defused)
    assert ".gitignore" in names and "sub/.gitignore" in names and ".git/info/exclude" in names
    assert tampered == []


def test_prepare_keeps_an_ignore_file_the_task_shipped() -> None:
    """The verifier's copy of a workspace keeps a .gitignore the task itself shipped (and no commit tracks):
    the agent did not plant it. Before: `verify.prepare` did not tell gitsafe the task's files, so it was
    removed and named as tampering on every rollout, an honest one included."""
    import subprocess

    from appliance.sandbox.transfer import pack_dir
    from appliance.tasks.verify import prepare

    spec = TaskSpec(id="git-shipped-ignore", family="git", difficulty=2, instruction="Commit new.txt.",
                    verify_lang="python", verify=CLEAN_STATUS, solution="true\n",
                    files={"repo/.gitignore": "*.log\n"})
    with __import__("tempfile").TemporaryDirectory() as d:
        subprocess.run("mkdir repo && cd repo && git init -q -b main && printf '*.log\\n' > .gitignore",
                       shell=True, cwd=d, check=True, capture_output=True)
        archive, _ = pack_dir(Path(d))
    prepared, tampered = prepare(spec, archive)
    assert "repo/.gitignore" in members(prepared) and tampered == []
