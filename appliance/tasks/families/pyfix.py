"""Python repair: make a failing function's tests pass (the test file is protected; hidden checks too).

The verifier judges the values the module computes (`appliance_check.returns` in the sandbox image: the
module imported in a child that prints what each call came to), never the exit status of `python3
test_x.py`: a module that exits 0 on import passed every task that way.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from functools import partial

from appliance.tasks.families._common import make, spelled_out
from appliance.tasks.families._ops import Case, Ctx, generate_family, op
from appliance.tasks.format import TaskSpec

FAMILY = "pyfix"
DESCRIPTION = "fix a failing Python function so its tests pass"
MODULES = ["calc", "mathutils", "helpers", "tools", "util", "funcs", "lib", "core"]


@dataclass(frozen=True)
class Bug:
    name: str
    good: str  # the line that is right
    bad: str  # the line as shipped
    head: str  # the def line (and any line before the changed one)
    tests: tuple[str, ...]  # visible asserts
    hidden: tuple[str, ...]  # asserts only the verifier runs
    hint: str

    def source(self, broken: bool) -> str:
        return f"{self.head}\n    {self.bad if broken else self.good}\n"


BUGS = [
    Bug("add", "return a + b", "return a - b", "def add(a, b):", ("add(2, 3) == 5", "add(0, 4) == 4"),
        ("add(-1, 1) == 0", "add(10, 5) == 15"), "it subtracts instead of adding"),
    Bug("biggest", "return max(xs)", "return min(xs)", "def biggest(xs):", ("biggest([1, 5, 3]) == 5",),
        ("biggest([-2, -9]) == -2", "biggest([7]) == 7"), "it returns the smallest item"),
    Bug("is_even", "return n % 2 == 0", "return n % 2 == 1", "def is_even(n):", ("is_even(4)", "not is_even(7)"),
        ("is_even(0)", "not is_even(-3)"), "it answers the opposite"),
    Bug("last", "return xs[-1]", "return xs[0]", "def last(xs):", ("last([1, 2, 3]) == 3",),
        ("last(['a']) == 'a'", "last('xyz') == 'z'"), "it returns the first item"),
    Bug("factorial", "return 1 if n <= 1 else n * factorial(n - 1)",
        "return 1 if n <= 1 else n * factorial(n - 2)", "def factorial(n):",
        ("factorial(4) == 24", "factorial(1) == 1"), ("factorial(5) == 120", "factorial(0) == 1"),
        "the recursion steps down by 2"),
    Bug("shout", "return text.upper() + '!'", "return text.lower() + '!'", "def shout(text):",
        ("shout('hi') == 'HI!'",), ("shout('Go') == 'GO!'",), "it lowercases"),
    Bug("count_vowels", "return sum(1 for c in text.lower() if c in 'aeiou')",
        "return sum(1 for c in text if c in 'aeiou')", "def count_vowels(text):",
        ("count_vowels('banana') == 3", "count_vowels('AEx') == 2"), ("count_vowels('Ice') == 2",),
        "it misses capital vowels"),
    Bug("average", "return sum(xs) / len(xs)", "return sum(xs) / (len(xs) + 1)", "def average(xs):",
        ("average([2, 4]) == 3",), ("average([5]) == 5", "average([1, 2, 3]) == 2"), "it divides by one too many"),
    Bug("reverse", "return text[::-1]", "return text[::1]", "def reverse(text):", ("reverse('abc') == 'cba'",),
        ("reverse('ab') == 'ba'", "reverse('') == ''"), "it does not reverse"),
    Bug("clamp", "return max(lo, min(hi, x))", "return max(lo, min(lo, x))", "def clamp(x, lo, hi):",
        ("clamp(5, 0, 3) == 3", "clamp(2, 0, 3) == 2"), ("clamp(-1, 0, 3) == 0",), "it clamps to lo on both sides"),
    Bug("subtract", "return a - b", "return a + b", "def subtract(a, b):", ("subtract(5, 3) == 2",),
        ("subtract(0, 4) == -4",), "it adds instead of subtracting"),
    Bug("is_positive", "return n > 0", "return n < 0", "def is_positive(n):",
        ("is_positive(3)", "not is_positive(-2)"), ("not is_positive(0)",), "the comparison points the wrong way"),
    Bug("larger", "return a if a > b else b", "return a if a < b else b", "def larger(a, b):",
        ("larger(2, 9) == 9", "larger(4, 1) == 4"), ("larger(-1, -5) == -1",), "it returns the smaller one"),
]

# Level 5: implement a function from its docstring; hidden checks decide.
STUBS = [
    ("is_palindrome", "def is_palindrome(text):\n    \"\"\"True if text reads the same backwards, ignoring case.\"\"\"",
     "return text.lower() == text.lower()[::-1]", ("is_palindrome('Abba')", "not is_palindrome('abc')"),
     ("is_palindrome('')", "is_palindrome('Racecar')", "not is_palindrome('ab')")),
    ("word_count", "def word_count(text):\n    \"\"\"The number of whitespace-separated words in text.\"\"\"",
     "return len(text.split())", ("word_count('a b c') == 3",), ("word_count('') == 0", "word_count(' x  y ') == 2")),
    ("digits_sum", "def digits_sum(n):\n    \"\"\"The sum of the decimal digits of the non-negative integer n.\"\"\"",
     "return sum(int(d) for d in str(n))", ("digits_sum(123) == 6",), ("digits_sum(0) == 0", "digits_sum(909) == 18")),
    ("initials", "def initials(name):\n"
                 "    \"\"\"The capitalised first letters of each word: 'ada love lace' -> 'ALL'.\"\"\"",
     "return ''.join(w[0].upper() for w in name.split())", ("initials('ada love lace') == 'ALL'",),
     ("initials('x') == 'X'", "initials('Bo  Di') == 'BD'")),
]


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy={lvl: partial(_legacy, lvl) for lvl in (1, 2, 3, 4, 5)})


def _legacy(level: int, rng: random.Random) -> TaskSpec:
    mod = rng.choice(MODULES)
    if level == 5:
        return _l5(rng, mod)
    n_funcs, n_bugs = {1: (1, 1), 2: (1, 1), 3: (3, 1), 4: (4, 2)}[level]
    # level 1 spells out a sed command, so its bug must read the same as a sed pattern
    pool = [b for b in BUGS if not set(b.bad + b.good) & set("[]/*'\\&^$.")] if level == 1 else BUGS
    funcs = rng.sample(pool, n_funcs)
    broken = funcs[:n_bugs]
    order = funcs[:]
    rng.shuffle(order)
    src = "\n\n".join(b.source(b in broken) for b in order)
    good_src = "\n\n".join(b.source(False) for b in order)
    test_file = f"test_{mod}.py"
    tests = _test_file(mod, order)
    files = {f"{mod}.py": src, test_file: tests}
    bug = broken[0]
    sed = f"sed -i 's/{bug.bad}/{bug.good}/' {mod}.py"
    if level == 1:
        instruction = spelled_out(sed)
    elif level == 2:
        instruction = (f"The function {bug.name} in {mod}.py has a bug: {bug.hint}. The broken line is "
                       f"`{bug.bad}`; it should be `{bug.good}`. Fix {mod}.py.")
    else:
        instruction = (f"`python3 {test_file}` fails. Fix the bug{'s' if n_bugs > 1 else ''} in {mod}.py so that "
                       f"the tests pass. Do not edit {test_file}.")
    solution = f"cat > {mod}.py <<'EOF'\n{good_src}EOF" if level > 1 else sed
    return make(FAMILY, level, "+".join(b.name for b in broken), instruction=instruction, files=files,
                verify=_verify(mod, test_file, order), solution=solution, protected=[test_file])


def _test_file(mod: str, funcs: list) -> str:
    names = ", ".join(f.name for f in funcs)
    asserts = "".join(f"assert {t}, {t!r}\n" for f in funcs for t in f.tests)
    return f"from {mod} import {names}\n\n{asserts}print('all tests passed')\n"


def case(test: str) -> tuple[str, object]:
    """An assert of the test file as (expression, expected value): `f(x) == 5` is ("f(x)", 5), `not f(x)` is
    ("f(x)", False), a bare `f(x)` is ("f(x)", True)."""
    node = ast.parse(test, mode="eval").body
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        return ast.unparse(node.left), ast.literal_eval(node.comparators[0])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ast.unparse(node.operand), False
    return test, True


def value_checks(mod: str, test_file: str, visible: list[str], hidden: list[str]) -> str:
    """The visible tests and the hidden checks, as values the module must compute (one child for both)."""
    shown, unseen = dict(map(case, visible)), dict(map(case, hidden))
    return ("from appliance_check import returns\n"
            f"_wrong = returns({mod!r}, {{**{shown!r}, **{unseen!r}}})\n"
            "def _said(exprs):\n"
            "    return '; '.join(f'{e}: {_wrong[e]}' for e in exprs if e in _wrong)[:300]\n"
            f"check(not _said({list(shown)!r}), 'python3 {test_file} should pass: ' + _said({list(shown)!r}))\n"
            f"check(not _said({list(unseen)!r}), 'hidden checks should pass: ' + _said({list(unseen)!r}))")


def _verify(mod: str, test_file: str, funcs: list) -> str:
    return value_checks(mod, test_file, [t for f in funcs for t in f.tests], [t for f in funcs for t in f.hidden])


def _l5(rng: random.Random, mod: str) -> TaskSpec:
    name, head, body, tests, hidden = rng.choice(STUBS)
    other = rng.choice(BUGS)
    src = f"{other.source(False)}\n\n{head}\n    raise NotImplementedError\n"
    good = f"{other.source(False)}\n\n{head}\n    {body}\n"
    test_file = f"test_{mod}.py"
    asserts = "".join(f"assert {t}, {t!r}\n" for t in tests)
    files = {f"{mod}.py": src, test_file: f"from {mod} import {name}\n\n{asserts}print('all tests passed')\n"}
    instruction = (f"Implement the function {name} in {mod}.py as its docstring describes. "
                   f"`python3 {test_file}` must pass, and it will also be checked on other inputs.")
    verify = value_checks(mod, test_file, list(tests), list(hidden))
    return make(FAMILY, 5, name, instruction=instruction, files=files, verify=verify,
                solution=f"cat > {mod}.py <<'EOF'\n{good}EOF", protected=[test_file])


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
@op("pyfix", "fix-function", (2, 3, 4), "Python: reading a failing test", "python3", [
    "`python3 {test}` fails: the function {fn} in {mod}.py {symptom}. Fix {mod}.py (not the test).",
    "Fix the bug in {fn} ({mod}.py) so that {test} passes. Leave {test} unchanged.",
    "{test} reports an AssertionError for {fn}. Repair the function in {mod}.py.",
    "There is a bug in {mod}.py: run {test}, find it, fix it.",
])
def _fix(c: Ctx) -> Case:
    mod = c.pick(MODULES)
    funcs = c.pick(BUGS, 2)
    bug = funcs[0]
    order = funcs[:]
    c.rng.shuffle(order)
    src = "\n\n".join(b.source(b is bug) for b in order)
    good = "\n\n".join(b.source(False) for b in order)
    test = f"test_{mod}.py"
    files = {f"{mod}.py": src, test: _test_file(mod, order)}
    return Case(files, _verify(mod, test, order), f"cat > {mod}.py <<'EOF'\n{good}EOF",
                dict(test=test, fn=bug.name, mod=mod, symptom=bug.hint), protected=[test],
                partial=f"python3 {test}; ...")
