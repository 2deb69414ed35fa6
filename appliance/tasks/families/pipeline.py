"""Shell pipelines: count, sort, uniq, top-N over word lists and logs."""

from __future__ import annotations

import random
from collections import Counter

from appliance.tasks.families._common import NAMES, WORDS, make, pick, spelled_out
from appliance.tasks.families._ops import Case, Ctx, generate_family, lines_is, log_lines, number_is, op, q, text_of
from appliance.tasks.format import TaskSpec

FAMILY = "pipeline"
DESCRIPTION = "shell pipelines: count, sort, uniq, top-N"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _words(rng: random.Random, distinct: int, total: int) -> list[str]:
    pool = pick(rng, WORDS, distinct)
    out = pool[:] + [rng.choice(pool) for _ in range(total - distinct)]
    rng.shuffle(out)
    return out


def _number_is(path: str, n: int) -> str:
    return f"check((read({path!r}) or '').strip() == '{n}', '{path} should hold {n}, found ' + repr(read({path!r})))"


def _l1(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    words = _words(rng, rng.randint(3, 6), rng.randint(6, 12))
    files = {f"{name}.txt": "\n".join(words) + "\n"}
    kind = rng.choice(["wc", "sort"])
    if kind == "wc":
        cmd, check = f"wc -l < {name}.txt > count.txt", _number_is("count.txt", len(words))
    else:
        cmd = f"sort {name}.txt > sorted.txt"
        check = f"text_is('sorted.txt', {chr(10).join(sorted(words))!r})"
    return make(FAMILY, 1, kind, instruction=spelled_out(cmd), files=files, verify=check, solution=cmd)


def _l2(rng: random.Random) -> TaskSpec:
    name, key = rng.choice(NAMES), rng.choice(WORDS)
    words = _words(rng, rng.randint(4, 7), rng.randint(10, 16))
    if key not in words:
        words[rng.randrange(len(words))] = key
    files = {f"{name}.txt": "\n".join(words) + "\n"}
    kind = rng.choice(["lines", "count-word"])
    if kind == "lines":
        instruction = f"Write the number of lines in {name}.txt into count.txt (just the number)."
        solution, check = f"wc -l < {name}.txt > count.txt", _number_is("count.txt", len(words))
    else:
        instruction = f"{name}.txt has one word per line. Write how many lines are exactly {key} into count.txt."
        solution, check = f"grep -cx {key} {name}.txt > count.txt", _number_is("count.txt", words.count(key))
    return make(FAMILY, 2, kind, instruction=instruction, files=files, verify=check, solution=solution)


def _l3(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    words = _words(rng, rng.randint(4, 8), rng.randint(10, 20))
    files = {f"{name}.txt": "\n".join(words) + "\n"}
    instruction = (f"{name}.txt has one word per line, with repeats. Write each distinct word once, sorted "
                   "alphabetically, one per line, into unique.txt. Then write the number of distinct words into "
                   "distinct.txt.")
    solution = f"sort -u {name}.txt > unique.txt && wc -l < unique.txt > distinct.txt"
    uniq = sorted(set(words))
    check = f"text_is('unique.txt', {chr(10).join(uniq)!r})\n" + _number_is("distinct.txt", len(uniq))
    return make(FAMILY, 3, "uniq", instruction=instruction, files=files, verify=check, solution=solution)


def _top(rng: random.Random, distinct: int) -> list[str]:
    """Words whose counts are all different, so the top-k order has no ties."""
    pool = pick(rng, WORDS, distinct)
    counts = rng.sample(range(1, distinct + 6), distinct)
    out = [w for w, c in zip(pool, counts, strict=True) for _ in range(c)]
    rng.shuffle(out)
    return out


def _l4(rng: random.Random) -> TaskSpec:
    k = rng.choice([2, 3])
    words = _top(rng, rng.randint(4, 6))
    name = rng.choice(NAMES)
    # Several words per line: the pipeline has to split them first.
    text = "\n".join(" ".join(words[i:i + 5]) for i in range(0, len(words), 5)) + "\n"
    files = {f"{name}.txt": text}
    top = [w for w, _ in Counter(words).most_common(k)]
    instruction = (f"{name}.txt holds words separated by spaces and newlines. Write the {k} most frequent words "
                   "into top.txt, most frequent first, one word per line.")
    solution = (f"tr ' ' '\\n' < {name}.txt | grep -v '^$' | sort | uniq -c | sort -rn | head -n {k} "
                f"| awk '{{print $2}}' > top.txt")
    check = f"text_is('top.txt', {chr(10).join(top)!r})"
    return make(FAMILY, 4, f"top{k}", instruction=instruction, files=files, verify=check, solution=solution)


def _l5(rng: random.Random) -> TaskSpec:
    codes = rng.sample(["200", "301", "302", "403", "404", "500", "503"], rng.randint(3, 5))
    counts = rng.sample(range(1, 12), len(codes))
    reqs = [c for c, n in zip(codes, counts, strict=True) for _ in range(n)]
    rng.shuffle(reqs)
    paths = [f"/{w}" for w in pick(rng, WORDS, 5)]
    lines = [f"10.0.0.{rng.randint(1, 254)} - - [01/May/2024:10:{i % 60:02d}:00] \"GET {rng.choice(paths)} HTTP/1.1\" "
             f"{code} {rng.randint(100, 9000)}" for i, code in enumerate(reqs)]
    files = {"access.log": "\n".join(lines) + "\n"}
    ranked = sorted(zip(codes, counts, strict=True), key=lambda p: -p[1])
    instruction = ("access.log is a web server log; the status code is the second-to-last field of each line. "
                   "Write status.txt with one line per status code in the form 'CODE COUNT' (for example "
                   "'404 3'), sorted by count, largest first.")
    solution = "awk '{print $(NF-1)}' access.log | sort | uniq -c | sort -rn | awk '{print $2, $1}' > status.txt"
    check = f"text_is('status.txt', {chr(10).join(f'{c} {n}' for c, n in ranked)!r})"
    return make(FAMILY, 5, "status", instruction=instruction, files=files, verify=check, solution=solution)


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
@op("pipeline", "word-frequency", (3, 4), "GNU coreutils: sort | uniq -c", "uniq -c", [
    "{src} has one word per line. Write each distinct word with its count as `word count` lines, sorted by word, "
    "to {out}.",
    "Count how often each word of {src} occurs; {out} gets lines like `apple 3`, alphabetical by word.",
    "{out} should be a frequency table of {src}: `<word> <count>`, in alphabetical order.",
    "Tally the words in {src} (one per line) into {out} as `word count`, sorted by the word.",
], traps=("spaces", "gzip", "missing-dir"))
def _freq(c: Ctx) -> Case:
    src, out = c.src("txt", ["votes", "words", "tags", "colors"]), c.out("freq.txt")
    words = _words(c.rng, c.rng.randint(3, 6), c.rng.randint(8, 16))
    counts = Counter(words)
    return Case({src: text_of(words)}, lines_is(out, [f"{w} {counts[w]}" for w in sorted(counts)]),
                f"sort {q(src)} | uniq -c | awk '{{print $2, $1}}' > {q(out)}", dict(src=src, out=out))


@op("pipeline", "most-common", (2, 3, 4), "GNU coreutils: sort | uniq -c | sort -rn | head", "sort | uniq -c", [
    "Which line occurs most often in {src}? Write it into {out}.",
    "Find the most frequent entry of {src} (one per line) and save it as {out}.",
    "{out} should hold the value that appears the most times in {src}.",
    "Write the mode (most repeated line) of {src} to {out}.",
], traps=("spaces", "gzip", "missing-dir"))
def _mode(c: Ctx) -> Case:
    src, out = c.src("txt", ["votes", "visitors", "tags", "picks"]), c.out("winner.txt")
    words = _words(c.rng, c.rng.randint(3, 5), c.rng.randint(8, 14))
    counts = Counter(words)
    top = max(counts, key=counts.__getitem__)
    if sorted(counts.values())[-2:] == [counts[top]] * 2:
        words.append(top)
    return Case({src: text_of(words)}, lines_is(out, [top]),
                f"sort {q(src)} | uniq -c | sort -rn | head -n 1 | awk '{{print $2}}' > {q(out)}",
                dict(src=src, out=out))


@op("pipeline", "sum-numbers", (1, 2, 3), "GNU awk: sum", "awk", [
    "{src} holds one number per line. Write their sum into {out}.",
    "Add up all the numbers in {src} and save the total (just the number) as {out}.",
    "{out} should contain the total of the values listed in {src}.",
    "What do the numbers in {src} sum to? Put it in {out}.",
], traps=("spaces", "gzip", "missing-dir"))
def _sum(c: Ctx) -> Case:
    src, out = c.src("txt", ["expenses", "hours", "amounts", "bytes"]), c.out("sum.txt")
    nums = [c.rng.randint(1, 500) for _ in range(c.rng.randint(4, 10))]
    return Case({src: text_of([str(n) for n in nums])}, number_is(out, sum(nums)),
                f"awk '{{s += $1}} END {{print s}}' {q(src)} > {q(out)}", dict(src=src, out=out))


@op("pipeline", "count-log-levels", (3, 4), "GNU awk: field counts", "awk", [
    "For the log {src}, write how many lines each level (third field: INFO, WARN, ...) has, as `LEVEL count` lines "
    "sorted by level, to {out}.",
    "Summarise {src} by log level: {out} gets `LEVEL count`, one level per line, alphabetical.",
    "{out} should count the lines of {src} per level (the 3rd whitespace-separated field), as `LEVEL N`, sorted.",
    "Tally {src}'s lines by level into {out} (`ERROR 2` style, levels sorted).",
], traps=("spaces", "gzip", "missing-dir"), heldout=True)
def _levels(c: Ctx) -> Case:
    src, out = c.src("log", ["app", "server", "worker"]), c.out("levels.txt")
    lines = log_lines(c.rng, c.rng.randint(8, 14))
    counts = Counter(x.split()[2] for x in lines)
    return Case({src: text_of(lines)}, lines_is(out, [f"{k} {v}" for k, v in sorted(counts.items())]),
                f"awk '{{print $3}}' {q(src)} | sort | uniq -c | awk '{{print $2, $1}}' > {q(out)}",
                dict(src=src, out=out))
