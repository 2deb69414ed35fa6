"""The git family's operations beyond the basics (table rows, see _ops.py): put a forgotten file into the
last commit, undo one older commit, bring one commit over from another branch, find the commit that
introduced a string, restore one file as of an older commit.

The requests state the goal (what the history should look like afterwards), not the git command. Commits
get fixed dates (`dated_commit`), so a task's hashes are the same in every sandbox; verifiers still find
the commits they need by subject, since the agent's own commits carry the current time."""

from __future__ import annotations

from appliance.tasks.families._common import WORDS
from appliance.tasks.families._git_common import GIT_PRELUDE, REPO, dated_commit
from appliance.tasks.families._kinds import answer_is
from appliance.tasks.families._ops import Case, Ctx, op, q, sentence, sentences, text_of

GITDOC = "git: everyday commands (giteveryday)"


def _clean() -> str:
    return "check(git('status', '--porcelain') == '', 'the working tree should be clean (everything committed)')"


def _count(n: int, why: str) -> str:
    msg = f"HEAD should have {n} commits ({why}), has "
    return f"check(git('rev-list', '--count', 'HEAD') == '{n}', {msg!r} + str(git('rev-list', '--count', 'HEAD')))"


def _at(rev: str, path: str, text: str) -> str:
    return (f"check(git('show', {rev + ':' + path!r}) == {text.strip()!r}, "
            f"{path!r} + ' in {rev} should be ' + repr({text.strip()!r})[:120]"
            f" + ', is ' + repr(git('show', {rev + ':' + path!r}))[:120])")


FORGOTTEN = [("login.html", "login.css", "Add the login page"),
             ("report.py", "test_report.py", "Add the monthly report"),
             ("invoice.tex", "logo.txt", "Add the invoice template"),
             ("deploy.sh", "deploy.env", "Add the deploy script"),
             ("parser.c", "parser.h", "Add the config parser")]


@op("git", "git-amend-add-file", (2, 3, 4), f"{GITDOC}: git commit --amend", "git commit --amend", [
    "Last commit is missing {forgot}. Put it in that commit, no new commit. Leave {scratch} untracked.",
    "Ugh, I committed \"{msg}\" a minute ago and forgot {forgot}, which belongs with it. Could you fold it into "
    "that same commit? I'd rather not have a separate \"oops\" commit in the history. {scratch} is just my "
    "scratch notes, keep it out of git.",
    "the commit \"{msg}\" should have included {forgot} aswell - add it to that commit insted of making a new "
    "one ({scratch} stays out of the repo)",
    "The history should end with one commit, \"{msg}\", that contains both {main} and {forgot}; {scratch} is "
    "not to be committed.",
], traps=("subdir",))
def _amend_add(c: Ctx) -> Case:
    main, forgot, msg = c.pick(FORGOTTEN)
    scratch = c.pick(["scratch.txt", "notes-to-self.md", "todo.local"])
    files = {"README.md": f"# {c.pick(WORDS)}\n\n{sentence(c.rng)}\n", main: text_of(sentences(c.rng, 3)),
             forgot: text_of(sentences(c.rng, 2)), scratch: "try the other approach tomorrow\n"}
    setup = REPO + dated_commit("Initial commit", 1, "README.md") + dated_commit(msg, 2, q(main))
    verify = GIT_PRELUDE + "\n".join([
        _count(2, "the missing file goes into the last commit, not a new one"),
        f"check(git('log', '-1', '--format=%s') == {msg!r}, 'the last commit should keep its message ' + {msg!r})",
        _at("HEAD", forgot, files[forgot]), _at("HEAD", main, files[main]),
        f"check(git('ls-files', {scratch!r}) == '', {scratch!r} + ' should stay untracked')",
        (f"check(git('status', '--porcelain', '--', {forgot!r}) == '', "
         f"{forgot!r} + ' should have nothing uncommitted')")])
    return Case(files, verify, f"git add {q(forgot)}\ngit commit -q --amend --no-edit",
                dict(main=main, forgot=forgot, msg=msg, scratch=scratch), setup=setup)


# (key, good value, bad value, the bad commit's subject, what it broke)
SETTINGS = [("timeout", "30", "5", "Lower the upload timeout to 5 seconds", "large uploads get cut off"),
            ("workers", "8", "2", "Use two workers to save memory", "the queue backs up every afternoon"),
            ("cache_size", "512", "64", "Shrink the cache to 64 MB", "every page load got slow"),
            ("log_level", "info", "debug", "Turn on debug logging everywhere", "the disk fills up with logs")]


@op("git", "git-revert-commit", (3, 4), f"{GITDOC}: git revert", "git revert", [
    "Undo the commit \"{bad}\" with a new commit; keep everything after it and keep the history.",
    "Since \"{bad}\" went in, {symptom}. Could you back out just that commit? The two commits after it "
    "(\"{c3}\" and \"{c4}\") are fine and must stay, and please don't rewrite history, others have pulled it.",
    "undo the comit that changed {key} in {cfg} (\"{bad}\") but not the later ones, the existing history must "
    "stay as is",
    "{cfg} should have {key} = {good} again, through a new commit that undoes \"{bad}\"; nothing committed "
    "after it may be lost.",
], traps=("subdir",))
def _revert(c: Ctx) -> Case:
    key, good, bad_value, bad, symptom = c.pick(SETTINGS)
    cfg = c.pick(["settings.ini", "server.conf", "app.cfg"])
    others = [k for k in ("host = 0.0.0.0", "port = 8000", "max_body_mb = 20", "region = eu-west")
              if c.rng.random() < 0.8]
    lines = [f"# {c.pick(WORDS)} service settings", f"{key} = {good}", *others]
    c3, c4 = "Document the retry policy", c.pick(["Log the upload size", "Add a health check", "Tidy imports"])
    readme, app = f"# {c.pick(WORDS)}\n\n{sentence(c.rng)}\n", "import os\n\nprint('starting')\n"
    files = {cfg: text_of(lines), "README.md": readme, "app.py": app}
    retry, note, extra = "retries = 3", "Failed uploads are retried three times.", f"print({c.pick(WORDS)!r})"
    setup = (REPO + dated_commit("Initial commit", 1)
             + f"sed -i 's/^{key} = {good}$/{key} = {bad_value}/' {cfg}\n" + dated_commit(bad, 2)
             + f"echo {q(retry)} >> {cfg}\necho {q(note)} >> README.md\n" + dated_commit(c3, 3)
             + f"echo {q(extra)} >> app.py\n" + dated_commit(c4, 4))
    final = text_of(lines + [retry])
    verify = GIT_PRELUDE + "\n".join([
        _count(5, "one new commit undoes it; no commit is removed"),
        (f"check(git('log', '-1', '--skip=1', '--format=%s') == {c4!r}, "
         f"'the commit before HEAD should still be ' + {c4!r})"),
        f"text_is({cfg!r}, {final!r})", _at("HEAD", cfg, final), _at("HEAD", "README.md", readme + note + "\n"),
        _at("HEAD", "app.py", app + extra + "\n"), _clean()])
    return Case(files, verify, f"git revert --no-edit $(git log --format=%H -F --grep={q(bad)} -n 1)",
                dict(bad=bad, symptom=symptom, c3=c3, c4=c4, key=key, good=good, cfg=cfg), setup=setup)


# (file, its lines, the index of the line the fix changes, the fixed line, the fix's subject)
FIXES = [("pager.py", ["def page(items, start, size):", "    end = start + size - 1", "    return items[start:end]"], 1,
          "    end = start + size", "Fix off-by-one in pagination"),
         ("units.py", ["def to_celsius(f):", "    return (f - 32) * 9 / 5"], 1, "    return (f - 32) * 5 / 9",
          "Fix the Fahrenheit conversion"),
         ("greet.sh", ["#!/bin/sh", "echo \"Hello, $USR\""], 1, "echo \"Hello, $USER\"",
          "Fix the greeting's variable name")]


@op("git", "git-cherry-pick", (3, 4), f"{GITDOC}: git cherry-pick", "git cherry-pick", [
    "Bring the commit \"{subj}\" from branch {branch} onto main, and nothing else from {branch}.",
    "The {branch} branch is a playground and not ready, but one commit on it, \"{subj}\", fixes a bug we're "
    "hitting in production. Can you get just that fix onto main (main is checked out)? Leave {branch} alone.",
    "main needs the fix \"{subj}\" thats on {branch} - only that one commit, dont merge the rest of the branch",
    "main should gain exactly one commit: the change \"{subj}\" that was made on {branch}.",
], traps=("subdir",))
def _cherry(c: Ctx) -> Case:
    path, lines, idx, fixed, subj = c.pick(FIXES)
    branch = c.pick(["experiment", "redesign", "spike/search", "wip-dana"])
    theme, search = "body { color: black; }\n", "def search(q):\n    return []\n"
    files = {"README.md": f"# {c.pick(WORDS)}\n", path: text_of(lines), "theme.css": theme, "search.py": search}
    good = lines[:idx] + [fixed] + lines[idx + 1:]
    setup = (REPO + dated_commit("Initial commit", 1) + f"git checkout -q -b {q(branch)}\n"
             + "echo 'body { color: #ddd; background: #111; }' > theme.css\n"
             + dated_commit("Try a dark colour scheme", 2)
             + f"printf '%s\\n' {' '.join(q(x) for x in good)} > {path}\n" + dated_commit(subj, 3)
             + "echo '    # TODO: rewrite with an index' >> search.py\n" + dated_commit("WIP: rewrite search", 4)
             + f"git checkout -q main\necho {q(sentence(c.rng))} >> README.md\n" + dated_commit("Update the README", 5))
    verify = GIT_PRELUDE + "\n".join([
        "check(git('rev-parse', '--abbrev-ref', 'HEAD') == 'main', 'main should be checked out')",
        _count(3, "main's two commits and the one brought over"),
        f"check(git('log', '-1', '--format=%s') == {subj!r}, 'the newest commit on main should be ' + {subj!r})",
        _at("HEAD", path, text_of(good)), _at("HEAD", "theme.css", theme), _at("HEAD", "search.py", search),
        f"check(git('rev-list', '--count', {branch!r}) == '4', 'branch {branch} should keep its 4 commits')", _clean()])
    return Case(files, verify, f"git cherry-pick $(git log {q(branch)} --format=%H -F --grep={q(subj)} -n 1)",
                dict(subj=subj, branch=branch), setup=setup)


FLAGS = ["LEGACY_MODE", "USE_NEW_PARSER", "ENABLE_BETA_UI", "SKIP_MIGRATIONS", "STRICT_TLS", "FAST_EXPORT"]


@op("git", "git-find-commit", (3, 4), f"{GITDOC}: git log -S", "git log -S", [
    "Which commit added {flag} to settings.py? Write its {what} to {out}.",
    "Someone switched on {flag} in settings.py a while back and nobody remembers why. Could you dig through "
    "the history and find the commit that first added it? Put its {what} into {out} and I'll go ask the author.",
    "find the commit that introduced {flag} (in settings.py) and write it's {what} in {out}",
    "{out} should hold the {what} of the commit in which {flag} first appeared in settings.py.",
], traps=("subdir",))
def _find_commit(c: Ctx) -> Case:
    flag = c.pick(FLAGS)
    out = c.pick(["commit.txt", "culprit.txt", "answer.txt"])
    subjects = ["Add the settings module", "Read the port from the environment", "Add switches for the rollout",
                "Bump the version", "Explain the settings in the README", "Rename the log file"]
    k = c.rng.randint(1, 3)  # the commit that adds the flag (its subject does not name it)
    files = {"settings.py": "PORT = 8000\n", "README.md": "# settings\n"}
    setup = REPO
    for i, subj in enumerate(subjects):
        if i == k:
            setup += f"echo {q(flag + ' = True')} >> settings.py\n"
        elif i == 4:  # a later commit mentions it too, in another file
            setup += f"echo {q('Set ' + flag + ' to False to go back.')} >> README.md\n"
        else:
            setup += f"echo {q('# ' + sentence(c.rng))} >> settings.py\n"
        setup += dated_commit(subj, i + 1)
    what = c.pick(["commit hash", "subject line"])
    if what == "commit hash":
        verify = GIT_PRELUDE + (
            f"_want = git('log', '--format=%H', '-F', '--grep', {subjects[k]!r}) or '?'\n"
            f"_got = (read({out!r}) or '').strip()\n"
            f"check(len(_got) >= 7 and _want.startswith(_got), {out!r} + ' should hold the hash ' + _want"
            " + ', found ' + repr(_got[:80]))")
        fmt = "%H"
    else:
        verify, fmt = GIT_PRELUDE + answer_is(out, subjects[k]), "%s"
    return Case(files, verify, f"git log -S {flag} --format={fmt} -- settings.py | tail -n 1 > {out}",
                dict(flag=flag, what=what, out=out), setup=setup)


@op("git", "git-restore-file", (3, 4), f"{GITDOC}: git checkout REV -- path", "git checkout", [
    "Put {src} back to how it was {n} commits ago and commit that.",
    "The last few commits made a mess of {src}. It was still right before \"{after}\" ({n} commits back). "
    "Could you restore just that file to that version and commit it? The other files keep their latest versions.",
    "restore {src} as it was {n} comits ago (only that file, the rest stays) and comit the result",
    "The newest commit should bring {src} back to its contents from just before \"{after}\", with every other "
    "file as it is now.",
], traps=("subdir",))
def _restore_old(c: Ctx) -> Case:
    src, other = c.pick([("notes.txt", "todo.txt"), ("config.yml", "README.md"), ("menu.txt", "prices.txt")])
    body, side = sentences(c.rng, 2), [sentence(c.rng)]
    files = {src: text_of(body), other: text_of(side)}
    setup, versions, subjects = REPO + dated_commit("Initial commit", 1), [], []
    steps = c.rng.randint(4, 6)
    touches = [c.rng.random() < 0.6 for _ in range(steps)]
    touches[-1] = True  # the newest commit changes it, so its latest version is not the one wanted
    for i, t in enumerate(touches):
        line = sentence(c.rng)
        if t:
            # the newest change appends, so the latest version is longer than every older one
            body = body + [line] if i == steps - 1 or c.rng.random() < 0.6 else [line] + body[1:]
            setup += f"printf '%s\\n' {' '.join(q(x) for x in body)} > {q(src)}\n"
            subjects.append(f"Update {src} ({i + 1})")
        else:
            side = side + [line]
            setup += f"echo {q(line)} >> {q(other)}\n"
            subjects.append(f"Note in {other} ({i + 1})")
        versions.append(text_of(body))
        setup += dated_commit(subjects[-1], i + 2)
    n = c.rng.randint(2, steps)
    want = versions[steps - 1 - n] if n < steps else files[src]
    verify = GIT_PRELUDE + "\n".join([
        _count(steps + 2, "one new commit on top"), _at("HEAD", src, want), f"text_is({src!r}, {want!r})",
        _at("HEAD", other, text_of(side)), _clean()])
    return Case(files, verify, f"git checkout HEAD~{n} -- {q(src)}\ngit commit -q -m {q('Restore ' + src)}",
                dict(src=src, n=str(n), after=subjects[steps - n]), setup=setup)
