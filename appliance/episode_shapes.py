"""The shapes a demonstration's episode takes, so that SFT teaches working habits and not only answers.

A reference solution shown as one command and then DONE teaches exactly that: one command, then DONE,
whatever the command printed. The agent trained on such demonstrations says DONE after `exit code 127`.
So each task's demonstration takes one of these shapes, chosen from the task's id (stable across restarts,
spread evenly over a pool):

    solve    the solution; DONE
    look     a look at the workspace (`ls -la` of the directory the task names, else of /workspace); the
             solution; DONE
    check    the solution; a look at what it made (the test file the task names run again, else the head of
             the file the task names, else `ls -la`); DONE
    recover  the solution's first command with its program name misspelled (it cannot run: bash answers
             "command not found", exit 127); the whole solution; DONE. The mistaken turn stays in the
             context but is never trained (its tokens are masked out): the lesson is the next turn.
    fix      the solution with the output printed instead of written to the file the request names (the
             slip trained agents make most on requests they were not trained on: issue 29), as context;
             a check of that file, which is missing (trained: a check that finds a real mistake pays);
             the solution; DONE. Only for a solution that ends in `> FILE` after commands that only read
             (`printed_instead`), so the slip changes nothing; for any other solution, the check shape.

Only the turns that move the task on are trained: the solution, a look the solution needs (below), the
turn after a slip, DONE. An optional look or check stays in the context as the slip does, but its tokens
are masked out. Trained, they displaced the work: after SFT on such episodes 8 of the first 23 practice
rollouts (training tasks, policy v1) ran only looks (`ls -la`, `head`) and said DONE, against 1 of 200
when every demonstration was one command then DONE (counted over the store's model calls; issue 16).

Whatever its shape, a trapped task whose family records the obvious attempt the trap makes fail
(`spec.meta["first_attempt"]`: the solution without `gunzip -k` or `mkdir -p`, or with the spaced name
unquoted) shows that attempt failing for real (context, masked), then the solution: the error it must read
is one the agent will meet, not a made-up slip.

Whatever its shape, an episode whose solution uses a file the request never names ("the only .csv file in
this directory" is metrics.csv) looks first, with a look that shows that name: a demonstration must not
teach the agent to know what it could only have found by looking. When the turn limit has no room for the
look and the shape's extra turn, the extra turn goes.

Whatever its shape, an episode whose solution edits a file in place (`sed -i` with a pattern quoting its
lines, a `cat > FILE <<` rewrite of a file that is there) reads that file first (`cat FILE`, trained): the
reference knows the exact line (its indentation, the old value), the agent only knows it by reading. Shown
without the read, the edit teaches writing patterns from memory: on the transfer dev set the trained agent
edited files it never opened with lines it made up (`s|^    "port": 183...|`, issue 29).

Every command really runs in the demonstration's sandbox and every observation is real; a look or check
that fails, or a mistake that does not fail the way it should, is dropped from the episode, never shown.
This module only decides the commands and the mask; `demonstrations.demonstrate` runs them.
"""

from __future__ import annotations

import hashlib
import re
import shlex

SHAPES = ("solve", "look", "check", "recover", "fix")

# words that a misspelling would turn into a syntax error or an assignment, not a missing program
_NOT_PROGRAMS = {"for", "while", "until", "if", "case", "function", "select", "time", "export", "declare",
                 "local", "readonly", "set", "unset", "shopt", "eval", "exec", "source", ".", "[", "[[", "{", "(",
                 "!", "coproc", "trap"}
_PROGRAM = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]*")
_FILE_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,5})(?![\w/-])")
_DIR_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+)/(?![\w.-])")
_BINARY = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".db", ".sqlite", ".png", ".jpg", ".pdf")


def shape_of(task_id: str, shapes: tuple[str, ...] = SHAPES) -> str:
    """The task's shape: a hash of its id, so a restart gives every task the same one."""
    if not shapes:
        return "solve"
    return shapes[int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % len(shapes)]


def named_dirs(instruction: str) -> list[str]:
    """Directories the request names with a trailing slash ("repo/", "logs/2024/"), in order."""
    return list(dict.fromkeys(m.group(1) for m in _DIR_NAME.finditer(instruction)))


def named_files(instruction: str) -> list[str]:
    """File names with an extension the request names ("found.txt", "src/app.py"), in order."""
    return [name for name in dict.fromkeys(m.group(1) for m in _FILE_NAME.finditer(instruction))
            if not name[0].isdigit()]  # "1.5" and "2.0" are numbers, not files


def look_command(instruction: str) -> str:
    dirs = named_dirs(instruction)
    return f"ls -la {shlex.quote(dirs[0])}" if dirs else "ls -la"


def unseen_names(instruction: str, solution: str) -> list[str]:
    """File names the solution uses and the request does not give; the caller keeps those that exist
    before the solution runs (an output the solution makes is not something to find)."""
    return [name for name in named_files(solution) if name not in instruction]


def edited_files(solution: str) -> list[str]:
    """Files the solution changes in place by their text (`sed -i ... FILE`, `cat > FILE <<`), in order; the
    caller keeps those that exist before the solution runs (a file it creates is not read first)."""
    out = []
    for line in solution.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if len(words) > 2 and words[0] == "sed" and any(w == "-i" or w.startswith("-i") for w in words[1:-1]):
            out.append(words[-1])
        elif len(words) >= 4 and words[:2] == ["cat", ">"] and words[3].startswith("<<"):
            out.append(words[2])
    return [name for name in dict.fromkeys(out) if not name.startswith("-")]


def read_command(name: str, solution: str) -> str:
    """How an in-place edit's file is read first: numbered (`cat -n`) when the solution addresses its lines by
    number (`sed -i '9s/a/b/' FILE`), since the number is read off that view; otherwise `cat`."""
    for line in solution.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if words[:1] == ["sed"] and words[-1:] == [name] and any(re.match(r"\d+(,\d+)?[sdc]", w) for w in words[1:-1]):
            return f"cat -n {shlex.quote(name)}"
    return f"cat {shlex.quote(name)}"


def look_commands(instruction: str, deep: bool) -> list[str]:
    """Looks at the workspace, best first; `deep` adds a `find` for a name `ls` of the top does not show."""
    dirs = named_dirs(instruction)
    out = [look_command(instruction)]
    if deep:
        out.append(f"find {shlex.quote(dirs[0]) if dirs else '.'} -maxdepth 3 -not -path '*/.git/*'")
    return out


def check_candidates(instruction: str) -> list[str]:
    """Checks after the solution, best first; the caller keeps the first whose target exists and that succeeds."""
    out = []
    files = named_files(instruction)
    for name in files:
        if re.fullmatch(r"(?:.*/)?test_\w+\.py", name):
            out.append(f"python3 {shlex.quote(name)}")
    for name in reversed(files):  # the output is usually named last ("... into found.txt")
        out.append(f"ls -la {shlex.quote(name)}" if name.endswith(_BINARY) else f"head -n 20 {shlex.quote(name)}")
    out.append("ls -la")
    return list(dict.fromkeys(out))


def check_target(command: str) -> str | None:
    """The path a check reads (whose existence the caller probes first), None for a bare `ls -la`."""
    words = shlex.split(command)
    return words[-1] if len(words) > 1 and words[-1] not in ("-la",) else None


def mistaken(solution: str) -> tuple[str, str] | None:
    """(the mistaken command, its misspelled program) for the recover shape, or None when the solution's
    first command cannot be misspelled into a plain "command not found": a keyword or builtin first, an
    assignment, a substitution that would run before the lookup, or unbalanced quotes."""
    first = re.split(r"[|;&<>\n()`]", solution.strip(), maxsplit=1)[0].strip()
    if not first or "$" in first or "\\" in first:
        return None
    try:
        words = shlex.split(first)
    except ValueError:
        return None
    if not words or words[0] in _NOT_PROGRAMS or "=" in words[0] or not _PROGRAM.fullmatch(words[0]):
        return None
    program = words[0]
    wrong = program + program[-1]  # "zip" -> "zipp", "sort" -> "sortt": a slip, not another tool
    return wrong + first[len(program):], wrong


# Programs that only read and print (with the options `_WRITES` refuses): the fix shape's slip runs one of
# these pipelines twice, once printing, once into the file.
_READERS = {"echo", "printf", "cat", "head", "tail", "sort", "uniq", "wc", "cut", "tr", "grep", "egrep", "fgrep",
            "zgrep", "zcat", "sed", "jq", "find", "ls", "du", "basename", "dirname", "realpath", "stat", "comm",
            "join", "paste", "nl", "tac", "rev", "column", "fold", "expand", "seq", "md5sum", "sha256sum", "date",
            "diff", "awk", "git"}
_GIT_READERS = {"log", "show", "rev-list", "diff", "status", "blame", "rev-parse", "shortlog", "ls-files", "grep"}
# the options with which a reader writes after all
_WRITES = {"sed": re.compile(r"(?:^|\s)(?:-\w*i|--in-place)|/w\b|\bw\s"),
           "sort": re.compile(r"(?:^|\s)(?:-\w*o|--output)"),
           "find": re.compile(r"-delete|-exec|-ok|-fprint"), "awk": re.compile(r"system|>|\|&?\s*\"|fflush|getline")}
_FINAL_WRITE = re.compile(r"\s+>\s*([\w./-]+)\s*$")


def printed_instead(solution: str, instruction: str) -> tuple[str, str] | None:
    """(the solution with its final `> FILE` dropped, FILE) for the fix shape, or None unless FILE is named
    in the request and everything before the redirect only reads: one pipeline or `&&`/`;` chain of
    `_READERS` without writing options, no other redirect out, no substitution or here-document."""
    text = solution.strip()
    m = _FINAL_WRITE.search(text)
    if not m or m.group(1) not in instruction:
        return None
    body = text[:m.start()].strip()
    if not body or any(c in body for c in (">", "`", "$(", "<(", "<<", "\n")):
        return None
    for part in re.split(r"\|\|?|&&|;", body):
        try:
            words = shlex.split(part)
        except ValueError:
            return None
        writes = _WRITES.get(words[0]) if words else None
        if not words or words[0] not in _READERS or (writes is not None and writes.search(part)):
            return None
        if words[0] == "git" and (len(words) < 2 or words[1] not in _GIT_READERS):
            return None
    return body, m.group(1)
