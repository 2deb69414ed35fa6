"""Table-driven operations: one everyday command-line operation in a few lines, rendered many ways.

An `Op` is one operation from a public inventory of command-line work (its `source` names the manual):
a `build(ctx) -> Case` that draws a workspace, the expected result (as verifier checks over the shared
PRELUDE helpers), the reference solution and the facts the request mentions; and at least three
`phrasings`, format strings over those facts that differ in wording, order of facts and detail.

`render` turns (op, phrasing, trap, hint) into a `TaskSpec`:

- **traps** make the first obvious attempt fail so the error must be read and the command retried.
  Generic ones are applied here: `spaces` (the input file's name has spaces), `gzip` (the request names
  the input, but only its gzipped copy is there: "No such file"), `missing-dir` (the output goes into a
  directory that does not exist yet), `absent` (the request names a tool that the sandbox image lacks:
  column, dos2unix, sponge, python), `subdir` (the repository the request is about is checked out in a
  subfolder the request names, not in the working directory: "not a git repository" until the agent goes
  there; the transfer dev set's git chores all look like this, and the family's never did). Op-specific
  ones (`header`, `crlf`, ...) are drawn by the op's own `build` from `ctx.trap`.
- **hints** (the ladder between level 1's spelled-out command and the bare request): `tool` appends the
  tool's name, `partial` the start of the reference command, `None` is the request only.
- **dressing** (`_dress`): half of the training requests at levels 2-5 get a reason before them, a remark
  after them, a terse lowercase form or a typo in the phrasing's own words; held-out requests never.
- **held-out pairs**: the last phrasing of every op, and every phrasing of an op with `heldout=True`,
  are generated only for split "heldout" (`pairs(..., split)`); training never sees them.

`spec.meta` carries operation, phrasing (index; -1 for a spelled-out level-1 command or a hand-written
generator), hint ("" for none), trap ("" for none), source, tool and `request_id` (the id of the same
task without a hint, so a success on a hinted task can be relabelled as one of the bare request).
Hand-written generators' tasks get operation "<family>.<variant>".
"""

from __future__ import annotations

import random
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from appliance.tasks.families._common import make, spelled_out
from appliance.tasks.families._dress import DRESS_RATE, dress
from appliance.tasks.format import TaskSpec

HINTS = ("tool", "partial", None)  # request + tool name, request + partial command, request only
GENERIC_TRAPS = ("spaces", "gzip", "missing-dir", "absent", "subdir")
IO = ("spaces", "gzip", "missing-dir")  # the traps any op with one input file and one output file takes
TRAP_RATE = {1: 0.0, 2: 0.15, 3: 0.35, 4: 0.5, 5: 1.0}  # share of tasks with a trap, per level
LEGACY_SHARE = 0.25  # share of a family's training tasks at levels 2-4 drawn from its older hand-written generators
OUT_DIRS = ["out", "reports", "results", "build", "export"]
CHECKOUTS = ["repo", "project", "app", "website", "service", "tool", "checkout", "site"]  # the `subdir` trap's folder
# how a request says where the checkout is (appended; {d} is the folder)
WHERE = ["The repository is in {d}/.", "(It's the git repo in {d}/.)", "This is about the checkout under {d}/.",
         "The repo lives in {d}/, not here.", "All of this happens in {d}/."]


@dataclass(slots=True)
class Case:
    """One drawn instance of an op. `facts` fill the phrasing; `src` (if any) is the main input path."""
    files: dict[str, str]
    verify: str
    solution: str
    facts: dict[str, str]
    setup: str = ""
    partial: str = ""  # the start of the reference command for the `partial` hint (default: derived)
    protected: list[str] = field(default_factory=list)
    # the obvious attempt that a generic trap makes fail (the solution before the trap's fix); a
    # demonstration shows it failing, then the solution (spec.meta["first_attempt"])
    first_attempt: str = ""
    context: str = ""  # a sentence the request ends with (where the `subdir` trap's checkout is)


@dataclass(frozen=True)
class Op:
    name: str
    family: str
    levels: tuple[int, ...]  # the levels (2-4, and 1 if its solution is one line) it is drawn at
    source: str  # the public manual it comes from, e.g. "GNU coreutils: sort"
    tool: str  # named by the `tool` hint
    phrasings: tuple[str, ...]
    build: Callable[[Ctx], Case]
    traps: tuple[str, ...] = ()
    heldout: bool = False  # the whole op is held out (all its phrasings)
    absent: str = ""  # for the `absent` trap: a tool the sandbox image lacks that would do this

    def heldout_phrasings(self) -> set[int]:
        return set(range(len(self.phrasings))) if self.heldout else {len(self.phrasings) - 1}


REGISTRY: dict[str, list[Op]] = {}


def op(family: str, name: str, levels: tuple[int, ...], source: str, tool: str, phrasings: list[str], *,
       traps: tuple[str, ...] = (), heldout: bool = False, absent: str = "") -> Callable[[Callable], Callable]:
    """Decorator: register `build` as an op of `family`."""
    def register(build: Callable[[Ctx], Case]) -> Callable[[Ctx], Case]:
        assert len(phrasings) >= 3, f"{name}: an op needs at least three phrasings"
        assert all(o.name != name for ops in REGISTRY.values() for o in ops), f"duplicate op {name}"
        if "absent" in traps:
            assert absent, f"{name}: the absent trap needs the absent tool"
        REGISTRY.setdefault(family, []).append(
            Op(name, family, levels, source, tool, tuple(phrasings), build, traps, heldout, absent))
        return build
    return register


def all_ops() -> list[Op]:
    return [o for ops in REGISTRY.values() for o in ops]


def pairs(family: str, level: int, split: str) -> list[tuple[Op, int]]:
    """(op, phrasing index) pairs usable for a family and level in a split: held-out pairs only in
    "heldout", the others only in "train"."""
    out = []
    for o in REGISTRY.get(family, []):
        if level not in o.levels and not (level == 5 and 4 in o.levels):
            continue
        held = o.heldout_phrasings()
        out += [(o, i) for i in range(len(o.phrasings)) if (i in held) == (split == "heldout")]
    return out


class Ctx:
    """What a build draws from: the rng, the trap, and names that carry the generic traps."""

    def __init__(self, rng: random.Random, trap: str | None) -> None:
        self.rng, self.trap = rng, trap
        self.outdir: str | None = None
        self.spaced = False
        self.sources: set[str] = set()

    def pick(self, pool: list, k: int | None = None):
        return self.rng.choice(pool) if k is None else self.rng.sample(pool, k)

    def src(self, ext: str, stems: list[str] | None = None) -> str:
        """An input file name; under the `spaces` trap (first call only) it has spaces in it."""
        stems = stems or STEMS
        if self.trap == "spaces" and not self.spaced:
            self.spaced = True
            a, b = self.rng.sample(SPACED, 2)
            name = f"{a} {b}.{ext}"
        else:
            name = f"{self.rng.choice(stems)}.{ext}"
        self.sources.add(name)
        return name

    def out(self, name: str) -> str:
        """An output path; under the `missing-dir` trap it lies in a directory that does not exist yet. It is
        never an input's name: `wc -w < words.txt > words.txt` would empty the file before counting it."""
        if name in self.sources:
            name = f"out-{name}"
        if self.trap == "missing-dir":
            if self.outdir is None:
                self.outdir = self.rng.choice(OUT_DIRS)
            return f"{self.outdir}/{name}"
        return name


def q(s: str) -> str:
    return shlex.quote(s)


def _partial(solution: str) -> str:
    first = solution.strip().split("\n", 1)[0]
    words = first.split(" ")
    keep = max(1, min(len(words) - 1, (len(words) + 1) // 2))
    return " ".join(words[:keep]) + " ..."


def _capital(text: str) -> str:
    # Only prose is capitalised: a request that starts with a file name keeps its case.
    return text[:1].upper() + text[1:] if text.startswith("the only ") else text


def draw_case(o: Op, rng: random.Random, trap: str | None, phrasing: str = "") -> Case:
    """Build a case and apply the generic trap to it."""
    ctx = Ctx(rng, trap)
    case = o.build(ctx)
    case.partial = case.partial or _partial(case.solution)
    src = case.facts.get("src")
    if trap == "gzip":
        assert src in case.files, f"{o.name}: the gzip trap needs facts['src'] to be a workspace file"
        case.first_attempt = case.solution
        case.setup += f"gzip -n -- {q(src)}\n"
        case.solution = f"gunzip -k -- {q(src + '.gz')}\n" + case.solution  # the request still names src
    if trap == "spaces":  # the obvious attempt leaves the name unquoted: the shell splits it in two
        attempt = case.solution
        for name in (n for n in case.files if " " in n):
            attempt = attempt.replace(q(name), name)
        case.first_attempt = attempt if attempt != case.solution else ""
    if trap == "spaces":  # written as a person would: in quotes, so the prose stays readable
        case.facts = {k: f'"{v}"' if " " in v and v in case.files else v for k, v in case.facts.items()}
    if ctx.outdir:
        case.first_attempt = case.first_attempt or case.solution
        case.solution = f"mkdir -p {ctx.outdir}\n" + case.solution
    if trap == "subdir":
        _in_subdir(case, rng)
    # Sometimes the input is not named at all: "the only .csv file here" (when it is the only one).
    shown = case.facts.get("src")
    if shown and trap not in ("gzip", "subdir") and rng.random() < 0.25 and _describable(phrasing):
        ext = PurePosixPath(shown).suffix
        if ext and "/" not in shown and sum(1 for n in case.files if n.endswith(ext)) == 1:
            case.facts["src"] = f"the only {ext} file in this directory"
    return case


def _in_subdir(case: Case, rng: random.Random) -> None:
    """Move the whole case into a folder (one of CHECKOUTS) that the request names: its files, set-up and
    checks; the reference goes there first. An output the request names is written in the checkout too, and
    named with the folder, so where it goes is never a guess."""
    d = rng.choice(CHECKOUTS)
    case.files = {f"{d}/{path}": text for path, text in case.files.items()}
    case.protected = [f"{d}/{path}" for path in case.protected]
    case.setup = f"mkdir -p {d}\ncd {d}\n" + case.setup
    case.verify = (f"if not check(os.path.isdir({d!r}), {d + '/ should still be there'!r}):\n    done()\n"
                   f"os.chdir({d!r})\n" + case.verify)
    case.first_attempt = case.first_attempt or case.solution
    case.solution = f"cd {d}\n" + case.solution
    if "out" in case.facts:
        case.facts["out"] = f"{d}/{case.facts['out']}"
    case.context = rng.choice(WHERE).format(d=d)


def _describable(phrasing: str) -> bool:
    """Whether {src} can be replaced by a description: it appears once and on its own. "{src}.gz", "{d}/{src}",
    "{src}'s" and a second "{src}" would read "the only .log file in this directory.gz"."""
    return phrasing.count("{src}") == 1 and not re.search(r"\{src\}(?:\.\w|['\w])|[/\w]\{src\}", phrasing)


def render(o: Op, phrasing: int, level: int, rng: random.Random, *, trap: str | None = None,
           hint: str | None = None, dressed: bool = False) -> TaskSpec:
    """The task of one op at one level: level 1 spells the reference command out; above, the phrasing
    (`dressed`: said the way people say things, `_dress`)."""
    case = draw_case(o, rng, trap, o.phrasings[phrasing] if level > 1 else "")
    if level == 1:
        return make(o.family, 1, o.name, instruction=spelled_out(case.solution), files=case.files,
                    verify=case.verify, solution=case.solution, setup=case.setup, protected=case.protected,
                    meta=_meta(o, None, None, None))
    template, before, after = dress(o.phrasings[phrasing], rng) if dressed else (o.phrasings[phrasing], "", "")
    request = " ".join(filter(None, [before, _capital(template.format(**case.facts)), after]))
    if trap == "absent" and f"`{o.absent}" not in request:
        request += f" (`{o.absent}` would do this, if it is installed.)"
    if case.context:
        request += " " + case.context

    def spec(h: str | None) -> TaskSpec:
        text = request
        if h == "tool":
            text += f"\n\nHint: `{o.tool}` can do this."
        elif h == "partial":
            text += f"\n\nHint: the command starts like this: `{case.partial}`"
        return make(o.family, level, o.name, instruction=text, files=case.files, verify=case.verify,
                    solution=case.solution, setup=case.setup, protected=case.protected,
                    max_turns=4 + 2 * level + (2 if trap else 0),
                    meta={**_meta(o, phrasing, trap, h), **({"first_attempt": case.first_attempt}
                                                            if case.first_attempt else {})})

    bare = spec(None)
    out = bare if hint is None else spec(hint)
    out.meta["request_id"] = bare.id
    return out


def _meta(o: Op, phrasing: int | None, trap: str | None, hint: str | None) -> dict:
    # TOML has no null: "no phrasing" is -1 (a spelled-out command), "no trap"/"no hint" is "".
    return {"operation": o.name, "phrasing": -1 if phrasing is None else phrasing, "trap": trap or "",
            "hint": hint or "", "source": o.source, "tool": o.tool}


def generate_family(family: str, level: int, rng: random.Random, *, split: str = "train",
                    hint: str | None = None, legacy: dict[int, Callable[[random.Random], TaskSpec]] | None = None,
                    ) -> TaskSpec:
    """A family's task at a level: its ops (with the split's phrasings, a trap at TRAP_RATE, the hint),
    or one of its older hand-written generators (`legacy`, level -> generator; training only above 1)."""
    legacy = legacy or {}
    if hint not in HINTS:
        raise ValueError(f"hint must be one of {HINTS}")
    ops = REGISTRY.get(family, [])
    if level == 1:
        ones = [o for o in ops if 1 in o.levels and (split == "heldout" or not o.heldout)]
        if 1 in legacy and (not ones or rng.random() < 0.5):
            return _legacy(legacy[1](rng))
        return render(rng.choice(ones), 0, 1, rng)
    coin = rng.random()  # drawn whatever the hint, so the hinted and bare renderings of a seed agree
    if level in legacy and (level == 5 or (split == "train" and hint is None and coin < LEGACY_SHARE)):
        return _legacy(legacy[level](rng))
    cands = pairs(family, level, split)
    if not cands:
        raise ValueError(f"family {family} has no operations at level {level} for split {split}")
    names = sorted({o.name for o, _ in cands})
    name = rng.choice(names)  # uniform over operations first, then over their phrasings
    o, phrasing = rng.choice([c for c in cands if c[0].name == name])
    trap = None
    if o.traps and (level == 5 or rng.random() < TRAP_RATE[level]):
        trap = rng.choice(o.traps)
    # drawn in the train split only, so the held-out set's draws (and tasks) are what they were
    dressed = split == "train" and rng.random() < DRESS_RATE
    return render(o, phrasing, level, rng, trap=trap, hint=hint, dressed=dressed)


def _legacy(spec: TaskSpec) -> TaskSpec:
    spec.meta.setdefault("operation", f"{spec.family}.{spec.meta.get('variant', 'legacy')}")
    spec.meta.setdefault("phrasing", -1)  # a hand-written template, not a table phrasing
    spec.meta.setdefault("trap", "")
    spec.meta.setdefault("hint", "")
    return spec


# --- content pools: multi-word, punctuated, varied ----------------------------------------------------
STEMS = ["notes", "report", "data", "todo", "summary", "draft", "inventory", "memo", "server", "ideas",
         "plan", "items", "words", "shopping", "guests", "tasks", "changelog", "contacts", "backlog", "journal"]
SPACED = ["my", "old", "team", "project", "final", "meeting", "march", "shared", "draft", "weekly", "copy", "q3"]
VERBS = ["Call", "Email", "Fix", "Review", "Order", "Book", "Update", "Clean", "Pay", "Check", "Send", "Print"]
THINGS = ["the invoice", "the printer", "a new battery", "the garden hose", "train tickets", "the README",
          "the kitchen sink", "two chairs", "the quarterly report", "the spare keys", "a birthday card",
          "the backup drive", "the dentist", "the leaking tap", "the office plants", "the Wi-Fi router"]
WHEN = ["today", "tomorrow", "on Monday", "before Friday", "next week", "by noon", "tonight", "this weekend"]
FULL_NAMES = ["Ann Lee", "Bob Stone", "Cleo Park", "Dan Brown", "Eve Adams", "Finn Moore", "Gus Hale", "Hana Ito",
          "Ivan Petrov", "Jade Wu", "Kim Novak", "Leo Costa", "Mia Rossi", "Ned Kelly", "Omar Haddad", "Pia Berg"]
CITIES = ["Oslo", "Lima", "Rome", "Kyiv", "Pune", "Cairo", "Quito", "Perth", "Turin", "Accra", "Porto", "Riga"]
PRODUCTS = ["desk lamp", "coffee mug", "USB cable", "notebook", "water bottle", "backpack", "headphones",
            "phone case", "yoga mat", "tea kettle", "wall clock", "doormat", "bike light", "pen set"]
LEVELS_LOG = ["INFO", "WARN", "ERROR", "DEBUG"]
EVENTS = ["user logged in", "cache miss for key", "disk usage at 81%", "connection reset by peer",
          "request took 1.2s", "retrying upload (attempt 2)", "config reloaded", "payment declined, card expired",
          "job finished: 42 rows", "timeout while reading socket", "started worker #3", "saved draft to disk"]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(VERBS)} {rng.choice(THINGS)} {rng.choice(WHEN)}{rng.choice(['.', '!', '.', '?', ';'])}"


def sentences(rng: random.Random, n: int) -> list[str]:
    """n distinct task-list lines ("Call the dentist before Friday.")."""
    out: list[str] = []
    while len(out) < n:
        s = sentence(rng)
        if s not in out:
            out.append(s)
    return out


def log_lines(rng: random.Random, n: int) -> list[str]:
    return [f"2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)} {rng.randint(10, 23)}:{rng.randint(10, 59)}:"
            f"{rng.randint(10, 59)} {rng.choice(LEVELS_LOG)} {rng.choice(EVENTS)}" for _ in range(n)]


def text_of(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


# --- verifier snippets over the PRELUDE helpers -----------------------------------------------------
def number_is(path: str, n: object) -> str:
    return (f"check((read({path!r}) or '').strip() == {str(n)!r}, "
            f"{path!r} + ' should hold {n}, found ' + repr(read({path!r})))")


def exact_is(path: str, text: str) -> str:
    """Byte-exact (for tasks about whitespace, where `text_is`'s normalisation would hide the point)."""
    return (f"check(read({path!r}) == {text!r}, {path!r} + ' should be exactly ' + repr({text!r})[:300] + ', found '"
            f" + repr(read({path!r}))[:300])")


def lines_is(path: str, lines: list[str]) -> str:
    return f"text_is({path!r}, {chr(10).join(lines)!r})"


def line_set_is(path: str, lines: list[str]) -> str:
    """The same lines in any order."""
    return (f"_want = {sorted(lines)!r}\ncheck(sorted(norm(read({path!r})) or []) == _want, "
            f"{path!r} + ' should list ' + repr(_want) + ' (any order), found ' + repr(read({path!r})))")


def gone(path: str) -> str:
    return f"check(not os.path.lexists({path!r}), {path!r} + ' should not exist')"
