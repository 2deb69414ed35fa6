"""Data wrangling: CSV and JSON files — select, count, sum, convert, group."""

from __future__ import annotations

import json
import random

from appliance.tasks.families._common import CITIES, PEOPLE, WORDS, make, pick, spelled_out
from appliance.tasks.format import TaskSpec

FAMILY = "data"
DESCRIPTION = "CSV and JSON wrangling: select, count, sum, convert, group"


def generate(level: int, rng: random.Random) -> TaskSpec:
    return [_l1, _l2, _l3, _l4, _l5][level - 1](rng)


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
        expected = ["name" if col == 1 else "city"] + [r[col - 1] for r in rows]
        check = f"text_is('column.txt', {chr(10).join(expected)!r})"
    else:
        cmd = "wc -l < people.csv > lines.txt"
        check = f"check((read('lines.txt') or '').strip() == '{len(rows) + 1}', 'lines.txt should hold {len(rows) + 1}')"
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
                "for r in rows:\n    r['age'] = int(r['age'])\njson.dump(rows, open('people.json', 'w'), indent=2)\nEOF")
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
