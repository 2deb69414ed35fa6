"""Text: extract and transform lines and words of text files."""

from __future__ import annotations

import random

# register the operations, in this order
from appliance.tasks.families import _text_ops_lines, _text_ops_reshape  # noqa: F401
from appliance.tasks.families._common import NAMES, PEOPLE, WORDS, make, pick, spelled_out
from appliance.tasks.families._ops import generate_family
from appliance.tasks.format import TaskSpec

FAMILY = "text"
DESCRIPTION = "extract and transform lines and words of text files"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _lines_with(rng: random.Random, key: str, n: int, hits: int) -> list[str]:
    """n lines of three words; exactly `hits` of them contain `key`."""
    pool = [w for w in WORDS if key not in w and w not in key]
    lines = [" ".join(pick(rng, pool, 3)) for _ in range(n)]
    for i in rng.sample(range(n), hits):
        ws = lines[i].split()
        ws[rng.randrange(3)] = key
        lines[i] = " ".join(ws)
    return lines


def _l1(rng: random.Random) -> TaskSpec:
    name, key = rng.choice(NAMES), rng.choice(WORDS)
    lines = _lines_with(rng, key, 6, 2)
    kind = rng.choice(["grep", "head", "upper"])
    if kind == "grep":
        cmd, expected = f"grep {key} {name}.txt > found.txt", [ln for ln in lines if key in ln.split()]
    elif kind == "head":
        cmd, expected = f"head -n 2 {name}.txt > top.txt", lines[:2]
    else:
        cmd, expected = f"tr a-z A-Z < {name}.txt > upper.txt", [ln.upper() for ln in lines]
    out = cmd.rsplit("> ", 1)[1]
    files = {f"{name}.txt": "\n".join(lines) + "\n"}
    check = f"text_is({out!r}, {chr(10).join(expected)!r})"
    return make(FAMILY, 1, kind, instruction=spelled_out(cmd), files=files, verify=check, solution=cmd)


def _l2(rng: random.Random) -> TaskSpec:
    name, key = rng.choice(NAMES), rng.choice(WORDS)
    lines = _lines_with(rng, key, 8, 3)
    kind = rng.choice(["grep", "tail", "upper"])
    files = {f"{name}.txt": "\n".join(lines) + "\n"}
    if kind == "grep":
        instruction = f"Write every line of {name}.txt that contains the word {key} into found.txt."
        solution, out, expected = f"grep -w {key} {name}.txt > found.txt", "found.txt", [
            ln for ln in lines if key in ln.split()]
    elif kind == "tail":
        instruction = f"Write the last 3 lines of {name}.txt into last.txt."
        solution, out, expected = f"tail -n 3 {name}.txt > last.txt", "last.txt", lines[-3:]
    else:
        instruction = f"Write the content of {name}.txt in capital letters (uppercase) into upper.txt."
        solution, out, expected = f"tr a-z A-Z < {name}.txt > upper.txt", "upper.txt", [ln.upper() for ln in lines]
    check = f"text_is({out!r}, {chr(10).join(expected)!r})"
    return make(FAMILY, 2, kind, instruction=instruction, files=files, verify=check, solution=solution)


def _l3(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    lines, numbers = [], []
    for _ in range(rng.randint(5, 8)):
        if rng.random() < 0.6:
            n = rng.randint(2, 999)
            numbers.append(str(n))
            lines.append(f"{rng.choice(PEOPLE)} bought {n} {rng.choice(WORDS)}s")
        else:
            lines.append(f"{rng.choice(PEOPLE)} likes {rng.choice(WORDS)}")
    if not numbers:
        lines.append("Ann bought 7 apples")
        numbers.append("7")
    instruction = (f"{name}.txt has lines like 'Ann bought 12 apples'. Extract every number from {name}.txt, "
                   "in order, one per line, into numbers.txt.")
    files = {f"{name}.txt": "\n".join(lines) + "\n"}
    solution = f"grep -oE '[0-9]+' {name}.txt > numbers.txt"
    check = f"text_is('numbers.txt', {chr(10).join(numbers)!r})"
    return make(FAMILY, 3, "numbers", instruction=instruction, files=files, verify=check, solution=solution)


def _l4(rng: random.Random) -> TaskSpec:
    users = pick(rng, [p.lower() for p in PEOPLE], 6)
    lines, errors = [], set()
    for i in range(14):
        level = rng.choice(["INFO", "INFO", "WARN", "ERROR"])
        user = rng.choice(users)
        if level == "ERROR":
            errors.add(user)
        lines.append(f"2024-05-{i + 1:02d} {level} user={user} action={rng.choice(WORDS)}")
    if not errors:
        lines.append(f"2024-05-20 ERROR user={users[0]} action=login")
        errors.add(users[0])
    instruction = ("app.log has lines like '2024-05-01 ERROR user=ann action=login'. Write the user names that "
                   "appear on ERROR lines into errors.txt: each name once, sorted alphabetically, one per line, "
                   "without the 'user=' prefix.")
    files = {"app.log": "\n".join(lines) + "\n"}
    solution = "grep ' ERROR ' app.log | grep -o 'user=[a-z]*' | cut -d= -f2 | sort -u > errors.txt"
    check = f"text_is('errors.txt', {chr(10).join(sorted(errors))!r})"
    return make(FAMILY, 4, "log-users", instruction=instruction, files=files, verify=check, solution=solution)


def _l5(rng: random.Random) -> TaskSpec:
    people = pick(rng, PEOPLE, 6)
    lasts = pick(rng, [w.capitalize() for w in WORDS], 6)
    pairs = list(zip(people, lasts, strict=True))
    rows = [f"{last}, {first}" for first, last in pairs]
    expected = [f"{first} {last}" for first, last in sorted(pairs, key=lambda p: p[1])]
    instruction = ("names.txt lists people as 'Last, First', one per line. Write them to fixed.txt as "
                   "'First Last', one per line, sorted alphabetically by last name.")
    files = {"names.txt": "\n".join(rows) + "\n"}
    solution = "sort names.txt | sed -E 's/^([^,]+), (.+)$/\\2 \\1/' > fixed.txt"
    check = f"text_is('fixed.txt', {chr(10).join(expected)!r})"
    return make(FAMILY, 5, "names", instruction=instruction, files=files, verify=check, solution=solution)

