"""Search and replace: in one file, across a tree, whole identifiers only, in names as well as contents."""

from __future__ import annotations

import random
import re

from appliance.tasks.families._common import NAMES, WORDS, make, pick, spelled_out
from appliance.tasks.families._ops import Case, Ctx, generate_family, lines_is, op, q, sentences, text_of
from appliance.tasks.format import TaskSpec

FAMILY = "replace"
DESCRIPTION = "search and replace across files and directory trees"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _text(rng: random.Random, old: str, lines: int, hits: int) -> str:
    pool = [w for w in WORDS if old not in w]
    out = [" ".join(pick(rng, pool, 4)) for _ in range(lines)]
    for i in rng.sample(range(lines), hits):
        ws = out[i].split()
        ws[rng.randrange(4)] = old
        out[i] = " ".join(ws)
    return "\n".join(out) + "\n"


def _tree_check(expected: dict[str, str], root: str) -> str:
    """Exact contents of every expected file, and no other files under root."""
    return (f"expected = {expected!r}\n"
            "for p, t in expected.items():\n    text_is(p, t)\n"
            f"found = sorted(os.path.join(d, f) for d, _, fs in os.walk({root!r}) for f in fs)\n"
            "check(found == sorted(expected), f'files under the tree should be {sorted(expected)}, found {found}')")


def _l1(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    old, new = pick(rng, WORDS, 2)
    text = _text(rng, old, 5, rng.randint(2, 4))
    cmd = f"sed -i 's/{old}/{new}/g' {name}.txt"
    check = f"text_is({name + '.txt'!r}, {text.replace(old, new)!r})"
    return make(FAMILY, 1, "sed", instruction=spelled_out(cmd), files={f"{name}.txt": text}, verify=check,
                solution=cmd)


def _l2(rng: random.Random) -> TaskSpec:
    name = rng.choice(NAMES)
    old, new = pick(rng, WORDS, 2)
    text = _text(rng, old, 6, rng.randint(2, 4))
    instruction = f"In {name}.txt, replace every occurrence of the word {old} with {new}."
    check = f"text_is({name + '.txt'!r}, {text.replace(old, new)!r})"
    return make(FAMILY, 2, "one-file", instruction=instruction, files={f"{name}.txt": text}, verify=check,
                solution=f"sed -i 's/{old}/{new}/g' {name}.txt")


def _l3(rng: random.Random) -> TaskSpec:
    old, new = pick(rng, WORDS, 2)
    dirs = ["docs", "docs/guide", f"docs/{rng.choice(WORDS)}"]
    files = {f"{rng.choice(dirs)}/{n}.txt": _text(rng, old, 4, rng.randint(1, 3)) for n in pick(rng, NAMES, 4)}
    other = {"docs/README.md": f"{old} stays here\n", "notes.txt": f"{old} is kept\n"}
    instruction = (f"Replace every occurrence of {old} with {new} in all .txt files under docs/, including its "
                   "subdirectories. Do not change any other file.")
    solution = f"find docs -name '*.txt' -exec sed -i 's/{old}/{new}/g' {{}} +"
    expected = {p: t.replace(old, new) for p, t in files.items()} | other
    check = _tree_check({p: t for p, t in expected.items() if p.startswith("docs/")}, "docs")
    check += f"\ntext_is('notes.txt', {other['notes.txt']!r})"
    return make(FAMILY, 3, "tree", instruction=instruction, files=files | other, verify=check, solution=solution)


def _module(rng: random.Random, fn: str, calls: int) -> str:
    lines = [f"from util import {fn}, {fn}_helper", ""]
    for i in range(calls):
        lines.append(f"x{i} = {fn}({i})")
    lines.append(f"y = {fn}_helper(1)")
    return "\n".join(lines) + "\n"


def _l4(rng: random.Random) -> TaskSpec:
    verb = rng.choice(["get", "load", "make", "read", "find"])
    old, new = f"{verb}_{rng.choice(WORDS)}", f"{verb}_{rng.choice(WORDS)}"
    if old == new:
        new += "s"
    util = f"def {old}(x):\n    return x + 1\n\n\ndef {old}_helper(x):\n    return {old}(x) * 2\n"
    files = {"src/util.py": util}
    for n in pick(rng, NAMES, rng.randint(2, 3)):
        files[f"src/{n}.py"] = _module(rng, old, rng.randint(1, 3))
    files["CHANGELOG.md"] = f"- added {old}\n"
    instruction = (f"Rename the Python function {old} to {new} in every .py file under src/ (its definition and "
                   f"all calls and imports). Only the exact name {old} changes: {old}_helper keeps its name. Do "
                   "not edit files outside src/.")
    pattern = re.compile(rf"\b{old}\b")
    expected = {p: pattern.sub(new, t) for p, t in files.items() if p.startswith("src/")}
    solution = f"grep -rl --include='*.py' {old} src | xargs sed -i 's/\\b{old}\\b/{new}/g'"
    check = _tree_check(expected, "src") + f"\ntext_is('CHANGELOG.md', {files['CHANGELOG.md']!r})"
    return make(FAMILY, 4, "identifier", instruction=instruction, files=files, verify=check, solution=solution)


def _l5(rng: random.Random) -> TaskSpec:
    old, new = pick(rng, WORDS, 2)
    files: dict[str, str] = {}
    for n in pick(rng, NAMES, 4):
        sub = rng.choice(["", f"{old}/", "lib/"])
        fname = rng.choice([f"{n}.txt", f"{old}_{n}.txt"])
        files[f"project/{sub}{fname}"] = _text(rng, old, 3, rng.randint(0, 2))
    files[f"project/{old}.cfg"] = f"name={old}\n"
    instruction = (f"Rename {old} to {new} everywhere under project/: in file contents, in file names and in "
                   f"directory names (for example project/{old}.cfg becomes project/{new}.cfg).")
    expected = {p.split("/", 1)[0] + "/" + p.split("/", 1)[1].replace(old, new): t.replace(old, new)
                for p, t in files.items()}
    solution = (f"grep -rl {old} project | xargs -r sed -i 's/{old}/{new}/g'\n"
                f"find project -depth -name '*{old}*' | while read -r p; do\n"
                f"  d=$(dirname \"$p\"); b=$(basename \"$p\"); mv \"$p\" \"$d/${{b//{old}/{new}}}\"\ndone")
    check = _tree_check(expected, "project")
    return make(FAMILY, 5, "rename-all", instruction=instruction, files=files, verify=check, solution=solution)


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
@op("replace", "replace-phrase", (1, 2, 3), "GNU sed: s///g in place", "sed -i", [
    "In {src}, replace every \"{old}\" with \"{new}\" (edit the file in place).",
    "Change all occurrences of {old} to {new} in {src}.",
    "{src} should say {new} wherever it now says {old}.",
    "Substitute {new} for {old} throughout {src}.",
], traps=("spaces", "gzip"))
def _phrase(c: Ctx) -> Case:
    src, lines = c.src("txt"), sentences(c.rng, c.rng.randint(4, 7))
    old, new = c.pick([("the printer", "the new printer"), ("Monday", "Tuesday"), ("invoice", "bill"),
                       ("tickets", "passes"), ("today", "tomorrow")])
    for i in c.rng.sample(range(len(lines)), 2):
        lines[i] = lines[i].rstrip(".!?;") + f", {old}."
    return Case({src: text_of(lines)}, lines_is(src, [x.replace(old, new) for x in lines]),
                f"sed -i 's/{old}/{new}/g' {q(src)}", dict(src=src, old=old, new=new))


@op("replace", "replace-path", (2, 3, 4), "GNU sed: s||| with another delimiter", "sed -i", [
    "Every path {old} in {src} must become {new}. Edit {src} in place.",
    "We moved {old} to {new}: update all mentions in {src}.",
    "{src} should refer to {new} instead of {old} everywhere.",
    "Rewrite the directory {old} to {new} throughout {src}.",
], traps=("spaces",))
def _path(c: Ctx) -> Case:
    src = c.src("conf", ["app", "nginx", "backup", "paths"])
    old, new = c.pick([("/usr/local/bin", "/opt/tools/bin"), ("/var/log/app", "/srv/logs/app"),
                       ("/home/ann/data", "/mnt/shared/data")])
    lines = [f"path_{i} = {old}/{w}" for i, w in enumerate(c.pick(["run.sh", "out.log", "cache", "tmp"], 3))]
    lines.insert(1, "# keep this comment: paths below")
    return Case({src: text_of(lines)}, lines_is(src, [x.replace(old, new) for x in lines]),
                f"sed -i 's|{old}|{new}|g' {q(src)}", dict(src=src, old=old, new=new))


@op("replace", "replace-case-insensitive", (3, 4), "GNU sed: s///gI", "sed -i", [
    "Replace the word {old} with {new} in {src}, whatever its capitalisation ({old}, {up}, ...).",
    "In {src}, change {old} to {new} case-insensitively (in place).",
    "{src} mixes {old}, {cap} and {up}; make all of them {new}.",
    "Turn every spelling of {old}, upper or lower case, into {new} in {src}.",
], traps=("spaces",))
def _ci(c: Ctx) -> Case:
    src, lines = c.src("txt"), sentences(c.rng, 5)
    old, new = c.pick([("colour", "color"), ("e-mail", "email"), ("wifi", "Wi-Fi"), ("todo", "TASK")])
    for i, form in zip(c.rng.sample(range(5), 3), [old, old.upper(), old.capitalize()]):
        lines[i] = lines[i].rstrip(".!?;") + f" ({form})."
    want = [re.sub(re.escape(old), new, x, flags=re.I) for x in lines]
    return Case({src: text_of(lines)}, lines_is(src, want), f"sed -i 's/{old}/{new}/gI' {q(src)}",
                dict(src=src, old=old, new=new, up=old.upper(), cap=old.capitalize()))
