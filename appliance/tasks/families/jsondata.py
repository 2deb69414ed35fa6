"""JSON with jq: read fields, count, select, edit, reshape (every level is table-driven; see _ops.py)."""

from __future__ import annotations

import json
import random

from appliance.tasks.families._ops import (
    CITIES,
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
)
from appliance.tasks.format import TaskSpec

FAMILY = "json"
DESCRIPTION = "JSON with jq: read fields, count, select, edit, reshape"
JQ = "jq manual"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)


def _dump(obj: object) -> str:
    return json.dumps(obj, indent=2) + "\n"


def json_is(path: str, expected: object) -> str:
    return (f"try:\n    got = json.loads(read({path!r}) or 'null')\nexcept ValueError:\n    got = 'not JSON'\n"
            f"check(got == {expected!r}, {path!r} + ' should be the JSON ' + {json.dumps(expected)[:300]!r}"
            " + ', found ' + repr(got)[:300])")


def _config(c: Ctx) -> dict:
    return {"name": c.pick(["billing", "search", "upload", "mailer", "gateway"]) + "-service",
            "version": f"{c.rng.randint(1, 4)}.{c.rng.randint(0, 12)}.{c.rng.randint(0, 9)}",
            "server": {"host": c.pick(["0.0.0.0", "127.0.0.1", "api.internal"]), "port": c.rng.randint(1024, 9999)},
            "database": {"user": c.pick(["app", "admin", "svc_reader"]), "pool": c.rng.randint(2, 32)},
            "debug": c.pick([True, False]), "owner": c.pick(FULL_NAMES)}


def _people(c: Ctx) -> list[dict]:
    return [{"name": n, "age": c.rng.randint(19, 70), "city": c.pick(CITIES)}
            for n in c.pick(FULL_NAMES, c.rng.randint(4, 7))]


def _src(c: Ctx, stems: list[str]) -> str:
    return c.src("json", stems)


FIELDS = [("server.port", ("server", "port")), ("server.host", ("server", "host")),
          ("database.user", ("database", "user")), ("version", ("version",)), ("owner", ("owner",)),
          ("database.pool", ("database", "pool"))]


@op("json", "json-get-field", (1, 2, 3), f"{JQ}: .a.b, -r", "jq -r", [
    "Write the value of {field} in {src} (the bare value, no quotes) into {out}.",
    "What is {field} set to in {src}? Save just the value in {out}.",
    "Read {src} and put the {field} setting, unquoted, into {out}.",
    "{out} should contain {src}'s {field} value and nothing else.",
], traps=IO)
def _get(c: Ctx) -> Case:
    cfg, (field, path) = _config(c), c.pick(FIELDS)
    src, out = _src(c, ["config", "settings", "app", "service"]), c.out("value.txt")
    val = cfg
    for k in path:
        val = val[k]
    return Case({src: _dump(cfg)}, lines_is(out, [str(val)]), f"jq -r '.{field}' {q(src)} > {q(out)}",
                dict(src=src, out=out, field=field))


@op("json", "json-length", (1, 2, 3), f"{JQ}: length", "jq length", [
    "{src} holds a JSON array. Write how many entries it has into {out}.",
    "Count the objects in the JSON list {src}; save the number as {out}.",
    "{out} should contain the length of the array in {src}.",
    "How many records does {src} contain? Just the number, into {out}.",
], traps=IO)
def _len(c: Ctx) -> Case:
    rows, src, out = _people(c), _src(c, ["people", "users", "members", "records"]), c.out("count.txt")
    return Case({src: _dump(rows)}, number_is(out, len(rows)), f"jq length {q(src)} > {q(out)}", dict(src=src, out=out))


@op("json", "json-select", (2, 3, 4), f"{JQ}: .[] | select(...)", "jq select", [
    "From the JSON array in {src}, write the names of everyone older than {age} to {out}, one per line, in file order.",
    "Who in {src} has an age above {age}? List their names (one per line, original order) in {out}.",
    "Select the entries of {src} with age > {age} and save just their name fields, one per line, as {out}.",
    "{out}: the name of each person in {src} whose age exceeds {age}.",
], traps=IO)
def _select(c: Ctx) -> Case:
    rows, src, out = _people(c), _src(c, ["people", "users", "members"]), c.out("older.txt")
    age = sorted(r["age"] for r in rows)[len(rows) // 2]
    return Case({src: _dump(rows)}, lines_is(out, [r["name"] for r in rows if r["age"] > age]),
                f"jq -r '.[] | select(.age > {age}) | .name' {q(src)} > {q(out)}", dict(src=src, out=out, age=str(age)))


@op("json", "json-set-field", (2, 3, 4), f"{JQ}: assignment", "jq", [
    "Write {out}: a copy of {src} with {field} changed to {value}. Everything else stays the same.",
    "Set {field} to {value} in the JSON config {src} and save the result as {out}.",
    "{out} should be {src} but with {field} = {value}.",
    "Update {src}'s {field} to {value}; the updated document goes to {out}.",
], traps=IO)
def _set(c: Ctx) -> Case:
    cfg, src = _config(c), _src(c, ["config", "settings", "app"])
    field, value = c.pick([("server.port", c.rng.randint(10000, 20000)), ("debug", not cfg["debug"]),
                           ("database.pool", c.rng.randint(40, 99))])
    new = json.loads(json.dumps(cfg))
    parts = field.split(".")
    (new[parts[0]] if len(parts) == 2 else new)[parts[-1]] = value
    out = c.out(c.pick(["updated.json", "new_config.json", "patched.json"]))
    shown = json.dumps(value)
    return Case({src: _dump(cfg)}, json_is(out, new), f"jq '.{field} = {shown}' {q(src)} > {q(out)}",
                dict(src=src, out=out, field=field, value=shown))


@op("json", "json-keys", (2, 3, 4), f"{JQ}: keys", "jq keys", [
    "Write the top-level keys of the JSON object in {src} to {out}, one per line, sorted.",
    "List the names of {src}'s top-level fields (alphabetical, one per line) in {out}.",
    "{out} should hold the sorted top-level key names of {src}.",
    "Which keys does the object in {src} have at the top level? Sorted, one per line, into {out}.",
], traps=IO)
def _keys(c: Ctx) -> Case:
    cfg = _config(c)
    for k in c.pick(["debug", "owner", "version", "database"], 2):
        del cfg[k]
    src, out = _src(c, ["config", "settings", "app"]), c.out("keys.txt")
    return Case({src: _dump(cfg)}, lines_is(out, sorted(cfg)), f"jq -r 'keys[]' {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("json", "json-minify", (1, 2, 3), f"{JQ}: -c", "jq -c", [
    "Write {src} as compact JSON on a single line into {out}.",
    "Minify the JSON in {src}: {out} should be the same data with no newlines or indentation.",
    "{out} should be a one-line version of {src} (same JSON value).",
    "Squash the pretty-printed {src} onto one line and save it as {out}.",
], traps=IO)
def _minify(c: Ctx) -> Case:
    data, src, out = _people(c), _src(c, ["people", "payload", "export"]), c.out("compact.json")
    return Case({src: _dump(data)}, json_is(out, data) + f"\ncheck(len(norm(read({out!r})) or []) == 1, 'one line')",
                f"jq -c . {q(src)} > {q(out)}", dict(src=src, out=out))


@op("json", "json-to-lines", (2, 3, 4), f"{JQ}: string interpolation", "jq -r", [
    "For every entry of the array in {src}, write a line `name,age` to {out} (file order, no header).",
    "Turn {src} into CSV-like lines of name and age (`Ann Lee,31`), one per person, in {out}.",
    "{out} should hold one `name,age` line per object in {src}.",
    "Flatten {src} into {out}: each person on a line as name, a comma, then age.",
], traps=IO)
def _lines(c: Ctx) -> Case:
    rows, src, out = _people(c), _src(c, ["people", "users", "members"]), c.out("people.csv")
    return Case({src: _dump(rows)}, lines_is(out, [f"{r['name']},{r['age']}" for r in rows]),
                f"jq -r '.[] | \"\\(.name),\\(.age)\"' {q(src)} > {q(out)}", dict(src=src, out=out))


@op("json", "json-sum", (2, 3, 4), f"{JQ}: map, add", "jq add", [
    "{src} is an array of order items with a price field. Write the total of all prices into {out}.",
    "Add up the price of every item in {src} and save the sum (a plain number) as {out}.",
    "{out} should contain the sum of the .price values in {src}.",
    "What do the items in {src} cost altogether? Write the number to {out}.",
], traps=IO)
def _sum(c: Ctx) -> Case:
    items = [{"product": p, "price": c.rng.randint(2, 300), "qty": c.rng.randint(1, 5)}
             for p in c.pick(PRODUCTS, c.rng.randint(3, 6))]
    src, out = _src(c, ["cart", "order", "items", "basket"]), c.out("total.txt")
    return Case({src: _dump(items)}, number_is(out, sum(i["price"] for i in items)),
                f"jq '[.[].price] | add' {q(src)} > {q(out)}", dict(src=src, out=out))


@op("json", "json-delete-key", (2, 3, 4), f"{JQ}: del", "jq del", [
    "Write {out}: {src} without its {key} field (remove the key entirely).",
    "Remove the {key} entry from the JSON object in {src} and save the result as {out}.",
    "{out} should be {src} minus the top-level key {key}.",
    "Delete {key} from {src}'s top level; write what is left to {out}.",
], traps=IO, heldout=True)
def _del(c: Ctx) -> Case:
    cfg, src = _config(c), _src(c, ["config", "settings"])
    key = c.pick(["owner", "debug", "version"])
    new = {k: v for k, v in cfg.items() if k != key}
    out = c.out("cleaned.json")
    return Case({src: _dump(cfg)}, json_is(out, new), f"jq 'del(.{key})' {q(src)} > {q(out)}",
                dict(src=src, out=out, key=key))


@op("json", "jsonl-count", (2, 3, 4), f"{JQ}: select on JSON lines", "jq -c select", [
    "{src} has one JSON object per line. Count the lines whose level is \"{level}\" and write the number into {out}.",
    "How many {level} events are in the JSON-lines file {src}? Save the count as {out}.",
    "{out} should contain the number of records in {src} with level = \"{level}\".",
    "Tally the \"{level}\" entries of {src} (JSON lines) into {out}.",
], traps=IO)
def _jsonl(c: Ctx) -> Case:
    level = c.pick(["error", "warn"])
    recs = [{"ts": 1700000000 + i * 37, "level": c.pick(["info", "error", "warn", "info"]),
             "msg": c.pick(["cache miss", "login ok", "disk 91% full", "retry #2", "slow query: 1.4s"])}
            for i in range(c.rng.randint(6, 12))]
    recs[0]["level"] = level
    src, out = c.src("jsonl", ["events", "audit", "app"]), c.out("count.txt")
    return Case({src: "".join(json.dumps(r) + "\n" for r in recs)},
                number_is(out, sum(r["level"] == level for r in recs)),
                f"jq -c 'select(.level == \"{level}\")' {q(src)} | wc -l > {q(out)}",
                dict(src=src, out=out, level=level))
