"""Data wrangling: CSV and JSON files — select, count, sum, convert, group."""

from __future__ import annotations

import json
import random

from appliance.tasks.families._common import CITIES, PEOPLE, WORDS, make, pick, spelled_out
from appliance.tasks.families._ops import (
    CITIES as TOWNS,
)
from appliance.tasks.families._ops import (
    FULL_NAMES,
    IO,
    PRODUCTS,
    Case,
    Ctx,
    generate_family,
    lines_is,
    number_is,
    op,
    q,
    text_of,
)
from appliance.tasks.format import TaskSpec

FAMILY = "data"
DESCRIPTION = "CSV and JSON wrangling: select, count, sum, convert, group"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _people(rng: random.Random, n: int) -> list[tuple[str, int, str]]:
    return [(name, rng.randint(18, 80), rng.choice(CITIES)) for name in pick(rng, PEOPLE, n)]


def _csv(header: str, rows: list[tuple]) -> str:
    return header + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows)


def _l1(rng: random.Random) -> TaskSpec:
    rows = _people(rng, rng.randint(3, 6))
    files = {"people.csv": _csv("name,age,city", rows)}
    kind = rng.choice(["cut", "wc"])
    if kind == "cut":
        col = rng.choice([1, 3])
        cmd = f"cut -d, -f{col} people.csv > column.txt"
        expected = ["name" if col == 1 else "city"] + [str(r[col - 1]) for r in rows]
        check = f"text_is('column.txt', {chr(10).join(expected)!r})"
    else:
        cmd = "wc -l < people.csv > lines.txt"
        check = (f"check((read('lines.txt') or '').strip() == '{len(rows) + 1}', "
                 f"'lines.txt should hold {len(rows) + 1}')")
    return make(FAMILY, 1, kind, instruction=spelled_out(cmd), files=files, verify=check, solution=cmd)


def _l2(rng: random.Random) -> TaskSpec:
    kind = rng.choice(["names", "json-field"])
    if kind == "names":
        rows = _people(rng, rng.randint(3, 7))
        files = {"people.csv": _csv("name,age,city", rows)}
        instruction = ("people.csv has the header line name,age,city. Write the names (first column) into "
                       "names.txt, one per line, without the header.")
        solution = "tail -n +2 people.csv | cut -d, -f1 > names.txt"
        check = f"text_is('names.txt', {chr(10).join(r[0] for r in rows)!r})"
    else:
        key = rng.choice(["name", "city", "color"])
        value = rng.choice(PEOPLE if key == "name" else CITIES if key == "city" else WORDS)
        cfg = {"version": rng.randint(1, 9), key: value, "enabled": True}
        files = {"config.json": json.dumps(cfg, indent=2) + "\n"}
        instruction = f"Read config.json and write the value of the \"{key}\" field (just the value) into value.txt."
        solution = f"python3 -c \"import json; print(json.load(open('config.json'))['{key}'])\" > value.txt"
        check = f"text_is('value.txt', {value!r})"
    return make(FAMILY, 2, kind, instruction=instruction, files=files, verify=check, solution=solution)


def _l3(rng: random.Random) -> TaskSpec:
    items = pick(rng, WORDS, rng.randint(4, 8))
    rows = [(w, rng.randint(1, 50), rng.randint(1, 9)) for w in items]
    col = rng.choice(["price", "qty"])
    total = sum(r[1] if col == "price" else r[2] for r in rows)
    files = {"sales.csv": _csv("item,price,qty", rows)}
    instruction = f"sales.csv has the header item,price,qty. Write the sum of the {col} column into total.txt."
    field = 2 if col == "price" else 3
    solution = f"awk -F, 'NR>1 {{s += ${field}}} END {{print s}}' sales.csv > total.txt"
    check = f"check((read('total.txt') or '').strip() == '{total}', 'total.txt should hold {total}')"
    return make(FAMILY, 3, col, instruction=instruction, files=files, verify=check, solution=solution)


def _l4(rng: random.Random) -> TaskSpec:
    rows = _people(rng, rng.randint(3, 6))
    files = {"people.csv": _csv("name,age,city", rows)}
    expected = [{"name": n, "age": a, "city": c} for n, a, c in rows]
    instruction = ("Convert people.csv (header name,age,city) into people.json: a JSON list with one object per "
                   "row, keys name, age and city, where age is a number. Keep the row order.")
    solution = ("python3 - <<'EOF'\nimport csv, json\nrows = list(csv.DictReader(open('people.csv')))\n"
                "for r in rows:\n    r['age'] = int(r['age'])\n"
                "json.dump(rows, open('people.json', 'w'), indent=2)\nEOF")
    check = (f"expected = {expected!r}\n"
             "try:\n    got = json.loads(read('people.json') or 'null')\nexcept ValueError:\n    got = None\n"
             "check(got == expected, f'people.json should be {expected!r}, found {got!r}')")
    return make(FAMILY, 4, "csv2json", instruction=instruction, files=files, verify=check, solution=solution)


def _l5(rng: random.Random) -> TaskSpec:
    regions = pick(rng, ["north", "south", "east", "west", "central"], 3)
    rows = [(rng.choice(regions), rng.choice(WORDS), rng.randint(1, 99)) for _ in range(rng.randint(8, 14))]
    totals: dict[str, int] = {}
    for region, _, amount in rows:
        totals[region] = totals.get(region, 0) + amount
    best = max(totals.values())
    tied = [r for r in totals if totals[r] == best]
    if len(tied) > 1:  # a tie would make "the top region" ambiguous
        rows.append((tied[0], "extra", 1))
        totals[tied[0]] += 1
    top = max(totals, key=totals.__getitem__)
    files = {"orders.csv": _csv("region,item,amount", rows)}
    instruction = ("orders.csv has the header region,item,amount. Write totals.json: a JSON object mapping each "
                   "region to the sum of its amounts (numbers). Then write the region with the largest total "
                   "into top.txt.")
    solution = ("python3 - <<'EOF'\nimport csv, json\nt = {}\nfor r in csv.DictReader(open('orders.csv')):\n"
                "    t[r['region']] = t.get(r['region'], 0) + int(r['amount'])\n"
                "json.dump(t, open('totals.json', 'w'))\nopen('top.txt', 'w').write(max(t, key=t.get) + '\\n')\nEOF")
    check = (f"expected = {totals!r}\n"
             "try:\n    got = json.loads(read('totals.json') or 'null')\nexcept ValueError:\n    got = None\n"
             "check(got == expected, f'totals.json should be {expected!r}, found {got!r}')\n"
             f"text_is('top.txt', {top!r})")
    return make(FAMILY, 5, "group", instruction=instruction, files=files, verify=check, solution=solution)


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
# Column names vary so a request has to be read, not pattern-matched: (name column, number column).
SCHEMAS = [("name", "age"), ("product", "price"), ("employee", "salary"), ("city", "population"),
           ("item", "qty"), ("customer", "total"), ("host", "latency_ms"), ("student", "score")]


def _table(c: Ctx, unique: bool = True) -> tuple:
    """A CSV with a header: label column, a number column, a text column, in a drawn order."""
    label, num = c.pick(SCHEMAS)
    extra = c.pick(["city", "region", "team", "status"])
    n = c.rng.randint(5, 9)
    pool = {"name": FULL_NAMES, "employee": FULL_NAMES, "customer": FULL_NAMES, "student": FULL_NAMES,
            "product": PRODUCTS, "item": PRODUCTS, "city": TOWNS}.get(label, [f"web{i:02d}" for i in range(40)])
    labels = c.pick(pool, n)
    nums = c.rng.sample(range(10, 999), n) if unique else [c.rng.randint(10, 999) for _ in range(n)]
    extras = {"city": TOWNS, "region": ["north", "south", "east", "west"], "team": ["red", "blue", "green"],
              "status": ["active", "paused", "closed"]}[extra]
    rows = [(lab, v, c.pick(extras[:3])) for lab, v in zip(labels, nums)]
    header = [label, num, extra]
    order = c.pick([[0, 1, 2], [1, 0, 2], [2, 0, 1], [0, 2, 1]])
    src = c.src("csv", ["people", "sales", "staff", "stock", "export", "records", "metrics"])
    lines = [",".join(header[i] for i in order)] + [",".join(str(r[i]) for i in order) for r in rows]
    return src, lines, rows, order.index(1) + 1, order.index(0) + 1, header, order.index(2) + 1


@op("data", "csv-column", (2, 3, 4), "GNU coreutils: cut -d, -f; tail -n +2", "cut", [
    "Write the values of the {col} column of {src} to {out}, one per line, without the header.",
    "{src} is a CSV with a header line. Extract its {col} column (values only) into {out}.",
    "List every {col} from {src} in {out}, keeping the row order; leave the column name out.",
    "{out}: the {col} field of each data row of {src}.",
], traps=IO)
def _csv_col(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    out = c.out(c.pick(["values.txt", "column.txt", "list.txt"]))
    k, col = c.pick([(lcol, header[0]), (ncol, header[1])])
    want = [ln.split(",")[k - 1] for ln in lines[1:]]
    return Case({src: text_of(lines)}, lines_is(out, want), f"tail -n +2 {q(src)} | cut -d, -f{k} > {q(out)}",
                dict(src=src, out=out, col=col))


@op("data", "csv-filter-rows", (2, 3, 4), "GNU awk: -F, with a condition", "awk", [
    "Write the rows of {src} whose {num} is greater than {limit} to {out} (no header line).",
    "From {src}, keep only the data rows with {num} > {limit}, in their original order, and save them as {out}.",
    "{out} should list the complete CSV lines of {src} where {num} exceeds {limit}; skip the header.",
    "Filter {src}: {num} above {limit}. Matching rows (whole lines, original order) go to {out}.",
], traps=IO)
def _csv_filter(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    vals = sorted(int(ln.split(",")[ncol - 1]) for ln in lines[1:])
    limit = vals[len(vals) // 2]
    want = [ln for ln in lines[1:] if int(ln.split(",")[ncol - 1]) > limit]
    out = c.out(c.pick(["big.csv", "filtered.csv", "over.csv"]))
    return Case({src: text_of(lines)}, lines_is(out, want),
                f"awk -F, 'NR > 1 && ${ncol} > {limit}' {q(src)} > {q(out)}",
                dict(src=src, out=out, num=header[1], limit=str(limit)))


@op("data", "csv-sort-by-column", (3, 4), "GNU coreutils: sort -t, -k", "sort", [
    "Sort the rows of {src} by {num}, largest first, keeping the header line on top; save as {out}.",
    "{out} should be {src} with its data rows ordered by descending {num} (numerically). Header stays first.",
    "Rank {src} by {num} (highest at the top, header line kept as line 1) into {out}.",
    "Write {out}: the header of {src}, then its rows from biggest to smallest {num}.",
], traps=IO)
def _csv_sort(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    want = [lines[0]] + sorted(lines[1:], key=lambda ln: -int(ln.split(",")[ncol - 1]))
    out = c.out(c.pick(["ranked.csv", "sorted.csv", "by_value.csv"]))
    return Case({src: text_of(lines)}, lines_is(out, want),
                f"(head -n 1 {q(src)} && tail -n +2 {q(src)} | sort -t, -k{ncol},{ncol} -rn) > {q(out)}",
                dict(src=src, out=out, num=header[1]))


@op("data", "csv-count-matching", (2, 3, 4), "GNU grep -c / awk over a CSV column", "awk", [
    "How many rows of {src} have {xname} equal to {value}? Write the number into {out}.",
    "Count the {value} rows ({xname} column) in {src}; the bare count goes to {out}.",
    "{out} should contain the number of data rows in {src} whose {xname} is {value}.",
    "Tally the entries of {src} with {xname} = {value} and save the tally in {out}.",
], traps=IO)
def _csv_count(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    value = lines[1].split(",")[xcol - 1]
    n = sum(ln.split(",")[xcol - 1] == value for ln in lines[1:])
    out = c.out("count.txt")
    return Case({src: text_of(lines)}, number_is(out, n),
                f"awk -F, 'NR > 1 && ${xcol} == \"{value}\"' {q(src)} | wc -l > {q(out)}",
                dict(src=src, out=out, xname=header[2], value=value))


@op("data", "csv-average", (3, 4), "GNU awk: sum / count, printf %.2f", "awk", [
    "Write the average of the {num} column of {src}, rounded to 2 decimals (like 12.50), into {out}.",
    "What is the mean {num} in {src}? Save it with exactly two decimal places in {out}.",
    "{out} should hold the arithmetic mean of {src}'s {num} values, formatted as %.2f.",
    "Average {num} over all rows of {src} (header excluded) to two decimals; write it to {out}.",
], traps=IO)
def _csv_avg(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    vals = [int(ln.split(",")[ncol - 1]) for ln in lines[1:]]
    out = c.out("average.txt")
    return Case({src: text_of(lines)}, number_is(out, f"{sum(vals) / len(vals):.2f}"),
                f"awk -F, 'NR > 1 {{ s += ${ncol}; n++ }} END {{ printf \"%.2f\\n\", s / n }}' {q(src)} > {q(out)}",
                dict(src=src, out=out, num=header[1]))


@op("data", "csv-max-label", (2, 3, 4), "GNU coreutils: sort -t, -k -n | tail -1 | cut", "sort", [
    "Which {label} in {src} has the highest {num}? Write just that {label} into {out}.",
    "Find the row of {src} with the largest {num} and put its {label} in {out}.",
    "{out} should name the {label} whose {num} is the maximum in {src}.",
    "Look up the top {num} in {src}; save the matching {label} (only that value) as {out}.",
], traps=IO)
def _csv_max(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    best = max(lines[1:], key=lambda ln: int(ln.split(",")[ncol - 1])).split(",")[lcol - 1]
    out = c.out(c.pick(["top.txt", "winner.txt", "max.txt"]))
    return Case({src: text_of(lines)}, lines_is(out, [best]),
                f"tail -n +2 {q(src)} | sort -t, -k{ncol},{ncol} -n | tail -n 1 | cut -d, -f{lcol} > {q(out)}",
                dict(src=src, out=out, num=header[1], label=header[0]))


@op("data", "csv-to-tsv", (1, 2, 3), "GNU coreutils: tr", "tr", [
    "Convert {src} from comma-separated to tab-separated and save it as {out}.",
    "{out} should be {src} with every comma replaced by a tab character.",
    "Turn the CSV {src} into a TSV file named {out} (header included).",
    "Make a tab-delimited copy of {src} called {out}.",
], traps=IO)
def _csv_tsv(c: Ctx) -> Case:
    src, lines, *_ = _table(c)
    out = c.out(src.rsplit(".", 1)[0].replace(" ", "_") + ".tsv")
    return Case({src: text_of(lines)}, lines_is(out, [ln.replace(",", "\t") for ln in lines]),
                f"tr ',' '\\t' < {q(src)} > {q(out)}", dict(src=src, out=out))


@op("data", "csv-distinct-values", (2, 3, 4), "GNU coreutils: cut | sort -u", "sort -u", [
    "List the distinct values of the {xname} column of {src}, sorted, one per line, in {out}.",
    "Which different {xname} values occur in {src}? Write each once, in sorted order, to {out}.",
    "{out} should hold the unique {xname} entries of {src} (sorted, no header).",
    "Collect the set of {xname}s used in {src} into {out}, alphabetically.",
], traps=IO)
def _csv_distinct(c: Ctx) -> Case:
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    want = sorted({ln.split(",")[xcol - 1] for ln in lines[1:]})
    out = c.out("distinct.txt")
    return Case({src: text_of(lines)}, lines_is(out, want),
                f"tail -n +2 {q(src)} | cut -d, -f{xcol} | sort -u > {q(out)}", dict(src=src, out=out, xname=header[2]))


@op("data", "csv-group-count", (3, 4), "GNU coreutils: sort | uniq -c", "uniq -c", [
    "For each {xname} in {src}, count its rows. Write lines `<{xname}>,<count>` sorted by {xname} into {out}.",
    "Group the rows of {src} by {xname} and write `value,count` per group (alphabetical) to {out}.",
    "{out} should say how many rows of {src} each {xname} has, as `name,count` lines, sorted by name.",
    "Count rows per {xname} in {src}; save `{xname},count` lines in sorted order as {out} (no header).",
], traps=IO)
def _csv_group(c: Ctx) -> Case:
    from collections import Counter
    src, lines, rows, ncol, lcol, header, xcol = _table(c)
    counts = Counter(ln.split(",")[xcol - 1] for ln in lines[1:])
    out = c.out("groups.csv")
    return Case({src: text_of(lines)}, lines_is(out, [f"{k},{v}" for k, v in sorted(counts.items())]),
                f"tail -n +2 {q(src)} | cut -d, -f{xcol} | sort | uniq -c | awk '{{print $2 \",\" $1}}' > {q(out)}",
                dict(src=src, out=out, xname=header[2]))


@op("data", "join-files", (3, 4), "GNU coreutils: join", "join", [
    "{a} has id,name lines and {b} has id,{num} lines, both sorted by id. Write {out} with id,name,{num} for each "
    "id in both.",
    "Join {a} and {b} on their first column (id) into {out}: lines `id,name,{num}`, sorted by id, only ids present "
    "in both files.",
    "Merge the two comma-separated files {a} and {b} by id; {out} gets `id,name,{num}` for the ids they share.",
    "{out} = {a} joined with {b} on the id field (comma-separated, ids in both only).",
], heldout=True)
def _join(c: Ctx) -> Case:
    num = c.pick(["score", "balance", "visits"])
    ids = sorted(c.rng.sample(range(100, 999), 7))
    names = c.pick(FULL_NAMES, 7)
    left = {f"u{i}": n for i, n in zip(ids[:6], names)}
    right = {f"u{i}": c.rng.randint(1, 500) for i in ids[1:]}
    a, b, out = "users.csv", f"{num}s.csv", "joined.csv"
    want = [f"{k},{left[k]},{right[k]}" for k in sorted(left) if k in right]
    return Case({a: text_of([f"{k},{v}" for k, v in sorted(left.items())]),
                 b: text_of([f"{k},{v}" for k, v in sorted(right.items())])},
                lines_is(out, want), f"join -t, {a} {b} > {out}", dict(a=a, b=b, out=out, num=num))
