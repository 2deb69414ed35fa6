"""Answers: find something out (a count, the largest or newest file, a value in a config or a log, which file
or line holds something, a total) and write the answer into the named file, checked exactly (whitespace at
its ends aside). Every level is table-driven (see _ops.py and _kinds.py).

What these teach: the answer goes into the file the request names (printing it is not enough), it is the
answer to the question asked (not the output of a nearby pipeline), and it is only the answer."""

from __future__ import annotations

import random

from appliance.tasks.families._common import WORDS
from appliance.tasks.families._kinds import ANSWERS, answer_is
from appliance.tasks.families._ops import (
    IO,
    PRODUCTS,
    Case,
    Ctx,
    generate_family,
    op,
    q,
    sentence,
    text_of,
)
from appliance.tasks.format import TaskSpec

FAMILY = "answer"
DESCRIPTION = ("find something out (a count, the largest or newest file, a value in a config or log, which file "
               "or line holds it, a total) and write the answer into the named file")
PATHS = ["/", "/login", "/api/orders", "/static/app.js", "/favicon.ico", "/search?q=lamp", "/cart", "/about"]


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)


@op("answer", "answer-count-status", (1, 2, 3), "GNU grep: -c on an access log", "grep -c", [
    "How many requests in {src} got a {status}? Number only, into {out}.",
    "We had complaints about broken pages yesterday. Could you check {src} and find out how many requests came "
    "back with status {status}? Please put just the number in {out}, I'll paste it into the ticket.",
    "count the requets in {src} that returned a {status} and save the count to {out}",
    "{out} should say how many {status} responses {src} records (just the number).",
], traps=IO)
def _count_status(c: Ctx) -> Case:
    src, out = c.src("log", ["access", "nginx-access", "web", "frontend"]), c.out(c.pick(ANSWERS))
    status = c.pick(["404", "500", "301", "403"])
    lines, hits = [], 0
    for i in range(c.rng.randint(8, 16)):
        code = status if c.rng.random() < 0.35 or (i == 0 and hits == 0) else \
            c.pick(["200", "200", "304", "502", "201"])
        hits += code == status
        lines.append(f"10.0.{c.rng.randint(0, 9)}.{c.rng.randint(2, 250)} - - [12/Mar/2024:10:{10 + i:02d}:"
                     f"{c.rng.randint(10, 59)} +0000] \"GET {c.pick(PATHS)} HTTP/1.1\" {code} "
                     f"{c.rng.randint(120, 9000)}")
    return Case({src: text_of(lines)}, answer_is(out, str(hits)), f"grep -c '\" {status} ' {q(src)} > {q(out)}",
                dict(src=src, out=out, status=status))


@op("answer", "answer-largest-file", (2, 3, 4), "GNU coreutils: ls -S / du", "ls -S", [
    "Which file in {d}/ is the {which}? Write its name to {out}.",
    "Our disk quota warning went off again. Can you look in the {d} folder and tell me which file there is the "
    "{which} one? Just its name in {out}, please (the other folders don't matter).",
    "whats the {which} file in {d}/ ? put the file name in {out}",
    "{out} should name the {which} file (by size) in {d}/.",
])
def _largest(c: Ctx) -> Case:
    d = c.pick(["uploads", "downloads", "media", "exports"])
    which = c.pick(["largest", "biggest", "smallest"])
    stems = c.pick(["holiday", "scan", "invoice", "draft", "clip", "backup", "photo", "slides", "notes"], 5)
    exts = [c.pick(["jpg", "pdf", "txt", "csv", "bin"]) for _ in stems]
    sizes = c.pick(list(range(200, 6000, 37)), len(stems))
    files = {f"{d}/{s}.{e}": ("x" * 63 + "\n") * (n // 64) + "y" * (n % 64)
             for s, e, n in zip(stems, exts, sizes, strict=True)}
    # outside {d}/, bigger and smaller than everything in it: not the answer
    files |= {f"elsewhere/{c.pick(WORDS)}.bin": "z" * 7000 + "\n", f"elsewhere/{c.pick(WORDS)}.txt": "s\n"}
    i = sizes.index((min if which == "smallest" else max)(sizes))
    name = f"{stems[i]}.{exts[i]}"
    flag, out = "-Sr" if which == "smallest" else "-S", c.pick(ANSWERS)
    return Case(files, answer_is(out, name, (f"{d}/{name}", f"./{d}/{name}")),
                f"ls {flag} {d} | head -n 1 > {out}", dict(d=d, which=which, out=out))


@op("answer", "answer-newest-file", (2, 3, 4), "GNU coreutils: ls -t", "ls -t", [
    "Which file in {d}/ was modified {when}? Put its name in {out}.",
    "I need to know which of the files in {d}/ is the one changed {when} - the names don't tell, they're just "
    "labels. Write that file's name into {out} for me?",
    "find the file in {d}/ that was changed {when} and write its name in {out} (name only)",
    "{out} should name the file in {d}/ with the {adj} modification time.",
])
def _newest(c: Ctx) -> Case:
    d = c.pick(["backups", "snapshots", "dumps", "exports"])
    newest = c.rng.random() < 0.6
    names = [f"{c.pick(['db', 'site', 'mail', 'crm'])}-{w}.{c.pick(['sql', 'tar', 'dump'])}" for w in c.pick(WORDS, 5)]
    days = c.pick(list(range(1, 28)), len(names))
    files = {f"{d}/{n}": f"{sentence(c.rng)}\n" for n in names}
    setup = "".join(f"touch -d '2024-04-{dd:02d} 0{dd % 9}:30' {q(d + '/' + n)}\n"
                    for n, dd in zip(names, days, strict=True))
    name = names[days.index(max(days) if newest else min(days))]
    out = c.pick(ANSWERS)
    return Case(files, answer_is(out, name, (f"{d}/{name}", f"./{d}/{name}")),
                f"ls -t{'' if newest else 'r'} {d} | head -n 1 > {out}",
                dict(d=d, out=out, when="most recently" if newest else "longest ago",
                     adj="newest" if newest else "oldest"),
                setup=setup)


SECTIONS = {"database": ["db.internal", "db-replica.internal"], "cache": ["redis.internal", "cache-2.internal"],
            "smtp": ["mail.example.com", "smtp.relay.local"], "queue": ["mq.internal", "rabbit.local"]}


@op("answer", "answer-config-value", (2, 3, 4), "GNU awk: a key inside an ini/yaml section", "awk", [
    "What {key} does the {sec} section of {src} set? Write the value to {out}.",
    "Ops asked me which {key} our {sec} uses in {src}, and I can never find it in that file. Could you look it "
    "up and put only the value in {out}?",
    "look up the {sec} {key} in {src} and write the value into {out}, nothing else",
    "{out} should hold the {key} configured for {sec} in {src}.",
])
def _config_value(c: Ctx) -> Case:
    secs = c.pick(sorted(SECTIONS), 3)
    ports = c.pick(list(range(2000, 9999, 111)), 3)
    vals = {s: {"host": c.pick(SECTIONS[s]), "port": str(p), "timeout": f"{c.rng.randint(2, 60)}s"}
            for s, p in zip(secs, ports, strict=True)}
    sec, key = c.pick(secs), c.pick(["host", "port", "timeout"])
    if c.rng.random() < 0.5:
        src = c.src("ini", ["app", "staging", "service", "settings"])
        lines = [f"; {c.pick(WORDS)} configuration, edit with care"]
        for s in secs:
            lines += ["", f"[{s}]"] + [f"{k} = {v}" for k, v in vals[s].items()]
        sol = f"awk -F' = ' '/^\\[/{{s=$0}} s==\"[{sec}]\" && $1==\"{key}\"{{print $2}}' {q(src)} > {{out}}"
    else:
        src = c.src("yaml", ["app", "staging", "service", "settings"])
        lines = [f"# {c.pick(WORDS)} configuration", f"name: {c.pick(WORDS)}"]
        for s in secs:
            lines += [f"{s}:"] + [f"  {k}: {v}" for k, v in vals[s].items()]
        sol = f"awk '/^[a-z]/{{s=$1}} s==\"{sec}:\" && $1==\"{key}:\"{{print $2}}' {q(src)} > {{out}}"
    out = c.out(c.pick(ANSWERS))
    return Case({src: text_of(lines)}, answer_is(out, vals[sec][key]), sol.replace("{out}", q(out)),
                dict(src=src, out=out, sec=sec, key=key))


@op("answer", "answer-log-date", (2, 3, 4), "GNU grep, then head or tail and cut, over a dated log", "grep", [
    "On what date did the {pos} {level} in {src} happen? Write it as YYYY-MM-DD to {out}.",
    "The nightly job has been flaky. From {src}, can you tell me the date of the {pos} {level} line? Put the "
    "date (YYYY-MM-DD, the way the log writes it) in {out}.",
    "whens the {pos} {level} in {src}? date only (YYYY-MM-DD) into {out}",
    "{out} should hold the date, as YYYY-MM-DD, of the {pos} {level} entry of {src}.",
], traps=IO)
def _log_date(c: Ctx) -> Case:
    src, out = c.src("log", ["backup", "cron", "nightly", "sync"]), c.out(c.pick(ANSWERS))
    level, pos = c.pick(["ERROR", "WARN"]), c.pick(["first", "last"])
    days = sorted(c.pick(list(range(1, 29)), c.rng.randint(7, 11)))
    kinds = ["INFO"] + [c.pick(["INFO", "INFO", level, "DEBUG"]) for _ in days[2:]] + ["INFO"]
    if level not in kinds:
        kinds[len(kinds) // 2] = level
    lines = [f"2024-05-{dd:02d} 02:{c.rng.randint(10, 59)}:07 {k} {c.pick(['backup', 'sync', 'rotate'])}: "
             f"{sentence(c.rng)}"
             for dd, k in zip(days, kinds, strict=True)]
    hits = [ln.split(" ")[0] for ln in lines if f" {level} " in ln]
    pick = "head" if pos == "first" else "tail"
    return Case({src: text_of(lines)}, answer_is(out, hits[0] if pos == "first" else hits[-1]),
                f"grep ' {level} ' {q(src)} | {pick} -n 1 | cut -d' ' -f1 > {q(out)}",
                dict(src=src, out=out, level=level, pos=pos))


@op("answer", "answer-which-file", (2, 3, 4), "GNU grep: -rl", "grep -rl", [
    "Which file under {d}/ mentions {needle}? Write its path to {out}.",
    "Somewhere in {d}/ there's a note about {needle} and I can't remember where I put it. Could you find the "
    "file and write its path (like {d}/something.txt) into {out}?",
    "one of the files in {d}/ talks about {needle}, wich one? path into {out}",
    "{out} should hold the path of the one file in {d}/ that contains {needle}.",
])
def _which_file(c: Ctx) -> Case:
    d = c.pick(["notes", "docs", "meetings", "inbox"])
    needle = c.pick([f"invoice {c.rng.randint(1000, 9999)}", f"ticket #{c.rng.randint(100, 999)}",
                     f"order {c.rng.randint(10000, 99999)}"])
    paths = [f"{d}/{p}" for p in c.pick(["monday.txt", "plans.md", "2024/q1.txt", "2024/q2.txt", "misc/ideas.txt",
                                         "todo.md", "misc/call.txt"], 5)]
    files = {p: text_of([sentence(c.rng) for _ in range(3)]) for p in paths}
    hit = c.pick(paths)
    files[hit] = files[hit] + f"Remember {needle} before the end of the month.\n"
    files[f"archive/{c.pick(WORDS)}.txt"] = f"Old copy: {needle}\n"  # outside {d}/: not the answer
    out = c.pick(ANSWERS)
    return Case(files, answer_is(out, hit, (f"./{hit}",)), f"grep -rlF {q(needle)} {d} > {out}",
                dict(d=d, needle=needle, out=out))


@op("answer", "answer-line-number", (2, 3, 4), "GNU grep: -n", "grep -n", [
    "On which line of {src} is the function {fn} defined? Write the line number to {out}.",
    "I'm reviewing {src} over the phone and need the line number where {fn} is defined (the def line, not "
    "where it's called). Could you write just that number into {out}?",
    "line number of the def of {fn} in {src} -> {out}",
    "{out} should hold the number of the line of {src} that starts the definition of {fn}.",
])
def _line_number(c: Ctx) -> Case:
    src = c.src("py", ["app", "tools", "billing", "report"])
    fns = c.pick(["load_config", "parse_row", "send_mail", "total_price", "make_report", "clean_name"], 4)
    fn = c.pick(fns[1:])
    lines = ['"""Small helpers for the ' + c.pick(PRODUCTS) + ' shop."""', "", "import os", ""]
    for f in fns:
        lines += ["", f"def {f}(value):", f"    # {sentence(c.rng)}",
                  f"    return {fn}(value)" if f == fns[0] else "    return value"]
    lines += ["", "", "if __name__ == '__main__':", f"    print({fn}(os.environ.get('X', '')))"]
    number = lines.index(f"def {fn}(value):") + 1
    out = c.pick(ANSWERS)
    return Case({src: text_of(lines)}, answer_is(out, str(number)),
                f"grep -n '^def {fn}(' {q(src)} | cut -d: -f1 > {out}", dict(src=src, fn=fn, out=out))


@op("answer", "answer-category-total", (2, 3, 4), "GNU awk: sum a column where another matches", "awk", [
    "How much did we spend on {cat} according to {src}? Write the total of the {amount} column for those rows "
    "to {out}.",
    "Quick one before the budget meeting: what's the sum of {amount} over the {cat} rows in {src}? Just the "
    "number in {out}, no units.",
    "total {amount} for {cat} in {src}, write the number to {out}",
    "{out} should hold the sum of {amount} over the rows of {src} whose category is {cat}.",
], traps=IO)
def _category_total(c: Ctx) -> Case:
    src, out = c.src("csv", ["expenses", "spending", "costs", "budget"]), c.out(c.pick(ANSWERS))
    amount = c.pick(["amount", "eur", "cost"])
    cats = c.pick(["travel", "food", "office", "software", "training"], 3)
    cat = cats[0]
    rows = [(f"2024-06-{c.rng.randint(10, 28)}", c.pick(cats) if i else cat, c.rng.randint(3, 400), c.pick(PRODUCTS))
            for i in range(c.rng.randint(6, 11))]
    order = c.pick([[0, 1, 2, 3], [1, 0, 2, 3], [0, 3, 1, 2], [2, 1, 0, 3]])
    header = ["date", "category", amount, "note"]
    lines = [",".join(header[i] for i in order)] + [",".join(str(r[i]) for i in order) for r in rows]
    ccol, acol = order.index(1) + 1, order.index(2) + 1
    total = sum(r[2] for r in rows if r[1] == cat)
    return Case({src: text_of(lines)}, answer_is(out, str(total)),
                f"awk -F, 'NR>1 && ${ccol}==\"{cat}\" {{s+=${acol}}} END {{print s}}' {q(src)} > {q(out)}",
                dict(src=src, out=out, cat=cat, amount=amount))
