"""The text family's operations (table rows, see _ops.py), part one: ordering, selecting and filtering lines.

Part two, _text_ops_reshape.py, imports this part, so these operations always register first: the order of
the family's operations in the registry is what a seed's level-1 draw picks from, and it must not change."""

from __future__ import annotations

from appliance.tasks.families._ops import (
    IO,
    Case,
    Ctx,
    lines_is,
    log_lines,
    number_is,
    op,
    q,
    sentences,
    text_of,
)

CORE = "GNU coreutils"


def sentences_file(c: Ctx, lo: int = 5, hi: int = 9) -> tuple[str, list[str]]:
    """A source file name and lo..hi sentences to put in it."""
    return c.src("txt"), sentences(c.rng, c.rng.randint(lo, hi))


@op("text", "sort-lines", (1, 2, 3), f"{CORE}: sort", "sort", [
    "Sort the lines of {src} alphabetically and save the result as {out}.",
    "{out} should contain every line of {src}, in alphabetical order.",
    "I need an A-to-Z sorted copy of {src}; call it {out} and leave the original alone.",
    "Write {out}: the lines of {src}, sorted (plain byte order, as `sort` does by default).",
], traps=IO)
def _sort(c: Ctx) -> Case:
    src, lines = sentences_file(c)
    out = c.out(c.pick(["sorted.txt", "alpha.txt", "ordered.txt"]))
    return Case({src: text_of(lines)}, lines_is(out, sorted(lines)), f"sort {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "sort-numeric-desc", (2, 3, 4), f"{CORE}: sort -n -r", "sort", [
    "{src} has one number per line. Write them to {out} from largest to smallest.",
    "Sort the numbers in {src} numerically, biggest first, into {out}.",
    "Put the values of {src} in descending numeric order (not alphabetical: 100 comes before 9) and save that "
    "as {out}.",
    "{out} must list {src}'s numbers in decreasing order.",
], traps=IO)
def _sort_n(c: Ctx) -> Case:
    src, out = c.src("txt", ["scores", "sizes", "latency", "numbers", "counts"]), c.out("desc.txt")
    nums = c.rng.sample(range(1, 2000), c.rng.randint(6, 10))
    return Case({src: text_of([str(n) for n in nums])}, lines_is(out, [str(n) for n in sorted(nums, reverse=True)]),
                f"sort -rn {q(src)} > {q(out)}", dict(src=src, out=out))


@op("text", "dedupe-sorted", (1, 2, 3), f"{CORE}: sort -u", "sort -u", [
    "{src} repeats some lines. Write each distinct line once, sorted, to {out}.",
    "Remove the duplicate lines of {src} (the order may change: sort them) and save the result as {out}.",
    "Make {out} from {src}: sorted, no line twice.",
    "Into {out} goes the sorted set of unique lines found in {src}.",
], traps=IO)
def _dedupe(c: Ctx) -> Case:
    src, lines = sentences_file(c, 4, 6)
    out = c.out("unique.txt")
    full = lines + c.pick(lines, 3)
    c.rng.shuffle(full)
    return Case({src: text_of(full)}, lines_is(out, sorted(set(full))), f"sort -u {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "dedupe-keep-order", (3, 4), "GNU awk: !seen[$0]++", "awk", [
    "{src} has repeated lines. Write {out} with every line's first occurrence only, in the original order.",
    "Drop the repeats from {src} without sorting (keep the first copy of each line where it is); save as {out}.",
    "Deduplicate {src} into {out}. Order matters here: lines must stay in the order they first appear.",
    "Save {src} to {out} minus any line that already appeared above it.",
], traps=IO)
def _dedupe_order(c: Ctx) -> Case:
    src, lines = sentences_file(c, 4, 6)
    out = c.out("deduped.txt")
    full = lines + c.pick(lines, 3)
    c.rng.shuffle(full)
    first = list(dict.fromkeys(full))
    return Case({src: text_of(full)}, lines_is(out, first), f"awk '!seen[$0]++' {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "head-lines", (1, 2, 3), f"{CORE}: head", "head", [
    "Write the first {n} lines of {src} to {out}.",
    "Take the top {n} lines from {src} and store them in {out}.",
    "{out} should hold only the beginning of {src}: its first {n} lines.",
    "Copy lines 1 to {n} of {src} into {out}.",
], traps=IO)
def _head(c: Ctx) -> Case:
    src, lines = sentences_file(c, 7, 10)
    n, out = c.rng.randint(2, 5), c.out("top.txt")
    return Case({src: text_of(lines)}, lines_is(out, lines[:n]), f"head -n {n} {q(src)} > {q(out)}",
                dict(src=src, out=out, n=str(n)))


@op("text", "tail-lines", (1, 2, 3), f"{CORE}: tail", "tail", [
    "Write the last {n} lines of {src} to {out}.",
    "{src} is a log; put its {n} most recent (final) lines into {out}.",
    "Save the end of {src}, {n} lines, as {out}.",
    "{out}: the final {n} lines from {src}, in their original order.",
], traps=IO)
def _tail(c: Ctx) -> Case:
    src, lines = c.src("log", ["app", "server", "worker", "cron", "deploy"]), log_lines(c.rng, c.rng.randint(7, 11))
    n, out = c.rng.randint(2, 5), c.out("recent.log")
    return Case({src: text_of(lines)}, lines_is(out, lines[-n:]), f"tail -n {n} {q(src)} > {q(out)}",
                dict(src=src, out=out, n=str(n)))


def _log_with(c: Ctx, level: str) -> tuple[str, list[str]]:
    src, lines = c.src("log", ["app", "server", "worker", "cron", "deploy"]), log_lines(c.rng, c.rng.randint(8, 12))
    if not any(f" {level} " in x for x in lines):
        lines[c.rng.randrange(len(lines))] = log_lines(c.rng, 1)[0].replace(" INFO ", f" {level} ").replace(
            " WARN ", f" {level} ").replace(" DEBUG ", f" {level} ").replace(" ERROR ", f" {level} ")
    return src, lines


@op("text", "grep-lines", (1, 2, 3), "GNU grep", "grep", [
    "Copy every line of {src} that contains {level} into {out}.",
    "Which lines of {src} are {level} messages? Save exactly those lines to {out}.",
    "Filter {src} down to the lines with the word {level} and write them to {out}, keeping their order.",
    "{out} should contain only the {level} lines of {src}.",
], traps=IO)
def _grep(c: Ctx) -> Case:
    level = c.pick(["ERROR", "WARN"])
    src, lines = _log_with(c, level)
    out = c.out(f"{level.lower()}s.log")
    return Case({src: text_of(lines)}, lines_is(out, [x for x in lines if level in x]),
                f"grep {level} {q(src)} > {q(out)}", dict(src=src, out=out, level=level))


@op("text", "grep-invert", (2, 3, 4), "GNU grep: -v", "grep -v", [
    "Write every line of {src} that does NOT contain DEBUG into {out}.",
    "Strip the DEBUG noise: {out} gets all lines of {src} except those mentioning DEBUG.",
    "Remove the DEBUG lines of {src}, writing what is left to {out} ({src} itself stays unchanged).",
    "{out} = {src} without its DEBUG lines.",
], traps=IO)
def _grep_v(c: Ctx) -> Case:
    src, lines = _log_with(c, "DEBUG")
    out = c.out("clean.log")
    return Case({src: text_of(lines)}, lines_is(out, [x for x in lines if "DEBUG" not in x]),
                f"grep -v DEBUG {q(src)} > {q(out)}", dict(src=src, out=out))


@op("text", "grep-count", (1, 2, 3), "GNU grep: -c", "grep -c", [
    "How many lines of {src} contain {level}? Write just the number into {out}.",
    "Count the {level} lines in {src} and save the count (a bare number) as {out}.",
    "Put the number of lines mentioning {level} in {src} into {out}.",
    "{out} should say how many {level} entries {src} has: only the number, nothing else.",
], traps=IO)
def _grep_c(c: Ctx) -> Case:
    level = c.pick(["ERROR", "WARN", "INFO"])
    src, lines = _log_with(c, level)
    out = c.out("count.txt")
    return Case({src: text_of(lines)}, number_is(out, sum(level in x for x in lines)),
                f"grep -c {level} {q(src)} > {q(out)}", dict(src=src, out=out, level=level))


@op("text", "grep-ignore-case", (2, 3, 4), "GNU grep: -i", "grep -i", [
    "Write the lines of {src} that mention {word}, in any capitalisation ({word}, {upper}, ...), into {out}.",
    "Case doesn't matter: find every line of {src} containing {word} and save them to {out}.",
    "{out} should hold all lines from {src} with the word {word} whether it is written in upper or lower case.",
    "Search {src} case-insensitively for {word}; the matching lines go to {out}.",
], traps=IO)
def _grep_i(c: Ctx) -> Case:
    src, lines = sentences_file(c, 6, 9)
    word = c.pick(["invoice", "printer", "report", "keys", "router"])
    idx = c.rng.sample(range(len(lines)), 3)
    for k, i in enumerate(idx):
        form = [word, word.upper(), word.capitalize()][k]
        lines[i] = lines[i].rstrip(".!?;") + f" (see {form})."
    want = [x for x in lines if word in x.lower()]
    return Case({src: text_of(lines)}, lines_is(c.out("matches.txt"), want),
                f"grep -i {word} {q(src)} > {q(c.out('matches.txt'))}",
                dict(src=src, out=c.out("matches.txt"), word=word, upper=word.upper()))


@op("text", "uppercase", (1, 2, 3), f"{CORE}: tr", "tr", [
    "Convert {src} to upper case and save it as {out}.",
    "{out} should be {src} with every letter capitalised.",
    "Make an ALL-CAPS copy of {src} named {out}.",
    "Shout it: write {src} in capital letters to {out}, punctuation unchanged.",
], traps=IO)
def _upper(c: Ctx) -> Case:
    src, lines = sentences_file(c, 3, 5)
    out = c.out("upper.txt")
    return Case({src: text_of(lines)}, lines_is(out, [x.upper() for x in lines]),
                f"tr a-z A-Z < {q(src)} > {q(out)}", dict(src=src, out=out))


@op("text", "reverse-lines", (1, 2, 3), f"{CORE}: tac", "tac", [
    "Write the lines of {src} in reverse order (last line first) to {out}.",
    "Flip {src} upside down: {out} starts with its last line and ends with its first.",
    "{out} should have the same lines as {src}, but bottom to top.",
    "Reverse the order of the lines in {src}; save as {out}.",
], traps=IO)
def _tac(c: Ctx) -> Case:
    src, lines = sentences_file(c, 4, 7)
    out = c.out("reversed.txt")
    return Case({src: text_of(lines)}, lines_is(out, lines[::-1]), f"tac {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "number-lines", (2, 3, 4), "GNU awk: NR", "awk", [
    "Write {src} to {out} with each line prefixed by its line number, a colon and a space (like `1: ...`).",
    "Number the lines of {src}: line N becomes `N: <the line>`. Save as {out}.",
    "{out} should be {src} with `1: `, `2: `, ... in front of the lines.",
    "Prefix every line of {src} with its position and ': ' and store the result as {out}.",
], traps=IO)
def _nl(c: Ctx) -> Case:
    src, lines = sentences_file(c, 3, 6)
    out = c.out("numbered.txt")
    return Case({src: text_of(lines)}, lines_is(out, [f"{i}: {x}" for i, x in enumerate(lines, 1)]),
                f"awk '{{print NR \": \" $0}}' {q(src)} > {q(out)}", dict(src=src, out=out))


@op("text", "line-range", (2, 3, 4), "GNU sed: -n 'a,bp'", "sed -n", [
    "Write lines {a} to {b} of {src} (inclusive) to {out}.",
    "Extract the section of {src} from line {a} through line {b} into {out}.",
    "{out} should contain only lines {a}-{b} of {src}.",
    "Cut out lines number {a} to {b} (counting from 1) from {src} and save them in {out}.",
], traps=IO)
def _range(c: Ctx) -> Case:
    src, lines = sentences_file(c, 7, 10)
    a = c.rng.randint(2, 4)
    b = c.rng.randint(a + 1, len(lines) - 1)
    out = c.out("section.txt")
    return Case({src: text_of(lines)}, lines_is(out, lines[a - 1:b]), f"sed -n '{a},{b}p' {q(src)} > {q(out)}",
                dict(src=src, out=out, a=str(a), b=str(b)))


@op("text", "delete-matching", (2, 3, 4), "GNU sed: /re/d", "sed -i", [
    "Delete every line containing {word} from {src}, editing the file in place.",
    "In {src}, remove the lines that mention {word}. Change {src} itself.",
    "{src} should no longer have any line with {word} in it; all other lines stay as they are.",
    "Edit {src} so the {word} lines are gone.",
], traps=("spaces", "gzip"))
def _sed_d(c: Ctx) -> Case:
    src, lines = sentences_file(c, 6, 9)
    word = c.pick(["invoice", "printer", "tickets", "keys", "router", "dentist"])
    for i in c.rng.sample(range(len(lines)), 2):
        lines[i] = lines[i].rstrip(".!?;") + f" and the {word}."
    return Case({src: text_of(lines)}, lines_is(src, [x for x in lines if word not in x]),
                f"sed -i '/{word}/d' {q(src)}", dict(src=src, word=word))
