"""What the request-shaped kinds share (answer, chores, edit, git history): verifier snippets for an answer
written into a named file and for a one-line edit, and the registers their requests are written in.

The requests state a goal with some context (and some irrelevant detail), in several registers: terse,
chatty, one with a typo, and a goal-only one (the last, held out). None of them names the tool: the hint
ladder (`_ops.render`) does that."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

ANSWERS = ["answer.txt", "result.txt", "reply.txt", "findings.txt", "out.txt"]


def answer_is(path: str, want: str, also: tuple[str, ...] = ()) -> str:
    """The file `path` holds exactly `want` (or one of `also`); only whitespace at its ends is ignored."""
    ok = [want, *also]
    return (f"_ans = read({path!r})\n"
            f"check(_ans is not None and _ans.strip() in {ok!r}, {path!r} + ' does not exist: the answer must be "
            f"written into it (printing it is not enough)' if _ans is None else {path!r} + ' should hold exactly ' "
            f"+ {want!r} + ', found ' + repr(_ans[:200]))")


# One line of a file changes, every other line stays byte-identical (a final newline may come or go), so
# a file rewritten from memory fails even when its changed line is right.
_ONE_LINE = r'''
import re
def one_line(path, orig, idx, pattern, what):
    got = read(path)
    if not check(got is not None, f"{path} should still exist"):
        return
    want, have = orig.rstrip("\n").split("\n"), got.rstrip("\n").split("\n")
    if not check(len(have) == len(want), f"{path} should keep its {len(want)} lines (only one line changes), "
                                         f"it has {len(have)}"):
        return
    line = have[idx]
    if pattern is None:
        check(line != want[idx], f"{what}: line {idx + 1} of {path} is still {line!r}")
    else:
        check(re.fullmatch(pattern, line) is not None, f"{what}: line {idx + 1} of {path} is {line!r}")
    diff = [i for i in range(len(want)) if i != idx and want[i] != have[i]]
    check(not diff, f"every other line of {path} should stay exactly as it was: line {diff[0] + 1} was "
                    f"{want[diff[0]]!r}, now {have[diff[0]]!r}" if diff else "")
'''


def one_line(path: str, original: str, index: int, pattern: str | None, what: str) -> str:
    """Checks: line `index` (0-based) of `path` matches the regex `pattern` (None: differs from the original),
    and every other line of the original is there unchanged."""
    return _ONE_LINE + f"one_line({path!r}, {original!r}, {index}, {pattern!r}, {what!r})"


def py_checks(module: str, calls: Sequence[tuple[str, object]], what: str) -> str:
    """Checks: importing `module` from the workspace and evaluating each expression gives its value. Judged
    as pyfix is (`appliance_check.values`): a child run as the agent's uid reports the values in a frame
    marked by a nonce made for this run, so text the module prints (a forged result line before an exit 0)
    is no value; a broken edit is a failed check, not a crashed verifier."""
    exprs = [e for e, _ in calls]
    return ("from appliance_check import same, values\n"
            f"_got = values({module!r}, {exprs!r})\n"
            f"for _e, _w in zip({exprs!r}, {[v for _, v in calls]!r}):\n"
            "    _k, _g = _got[_e]\n"
            f"    check(_k == 'value' and same(_g, _w), {what!r} + f': {{_e}} should be {{_w!r}}, got '"
            " + (repr(_g) if _k == 'value' else f'no value ({_g})'))\n")


_TOKEN = re.compile(r"[\w.\-\"]")  # a word of a span: a value, a key, a quoted JSON string


def sed_edit(text: str, index: int, new: str, path: str) -> str:
    """The reference edit of line `index` of `text` into `new`: `sed -i 's/OLD/NEW/'` over the shortest span
    of whole words around the change that occurs once in the whole file (widened a word at a time; dots left
    unescaped where that still matches only there), else the whole line (`sed_line`). People write
    `s/2.5.2/2.5.3/`, and a small model copies a value far more reliably than a whole indented line."""
    lines = text.split("\n")
    old = lines[index]
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    a, b, grow = p, len(old) - s, len(new) - len(old)
    while a > 0 and _TOKEN.match(old[a - 1]):
        a -= 1
    while b < len(old) and _TOKEN.match(old[b]):
        b += 1
    while True:
        span, repl = old[a:b], new[a:b + grow]
        if span.strip() and not re.search(r"['&\\|]", span + repl):
            pattern = re.escape(span).replace(r"\.", ".")
            hits = [(i, m) for i, line in enumerate(lines) for m in re.finditer(pattern, line)]
            if len(hits) == 1 and hits[0][0] == index and old[:hits[0][1].start()] + repl + \
                    old[hits[0][1].end():] == new:
                d = "|" if "/" in span + repl else "/"
                return f"sed -i 's{d}{_bre(span)}{d}{repl}{d}' {shlex.quote(path)}"
        if a == 0 and b == len(old):
            return sed_line(old, new, path)
        wider = _word_before(old, a), _word_after(old, b)
        a, b = wider if wider != (a, b) else (0, len(old))


def _word_before(line: str, a: int) -> int:
    """Where the span starting at `a` starts once it takes in the word before it (and what lies between)."""
    i = a
    while i > 0 and not _TOKEN.match(line[i - 1]):
        i -= 1
    if i == 0:
        return 0
    while i > 0 and _TOKEN.match(line[i - 1]):
        i -= 1
    return i


def _word_after(line: str, b: int) -> int:
    """Where the span ending at `b` ends once it takes in the next word; a trailing separator alone stays out."""
    i = b
    while i < len(line) and not _TOKEN.match(line[i]):
        i += 1
    if i == len(line):
        return len(line) if b == len(line) else b
    while i < len(line) and _TOKEN.match(line[i]):
        i += 1
    return i


def _bre(text: str) -> str:
    """`text` as a sed regex: brackets, anchors and stars escaped; dots left as they are (checked above)."""
    return re.sub(r"([*^$\[\]])", r"\\\1", text)


def sed_line(old: str, new: str, path: str) -> str:
    """The reference edit: `sed -i` replacing one whole line (these lines hold no '|', '&' or quote)."""
    esc = re.sub(r"([.*\[\]^$\\])", r"\\\1", old)
    return f"sed -i 's|^{esc}$|{new}|' {shlex.quote(path)}"
