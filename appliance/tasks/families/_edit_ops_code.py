"""The edit family's operations on code (table rows, see _ops.py): a wrong constant or comparison in a Python
module, a typo in a shell script. The fix is one line; the verifier runs the code and checks that every
other line is unchanged."""

from __future__ import annotations

import re

from appliance.tasks.families._common import AGENT_RUN
from appliance.tasks.families._kinds import one_line, py_checks, sed_edit
from appliance.tasks.families._ops import Case, Ctx, op, q, text_of

# (constant, its comment, the good value, the bad value's offset, the symptom's template, a function using it)
CONSTANTS = [
    ("VAT_PERCENT", "# standard rate", 21, -2, "invoices come out with {bad}% VAT, but our rate is {good}%",
     "def with_vat(cents):\n    \"\"\"The gross price of a net price in cents, rounded down.\"\"\"\n"
     "    return cents * (100 + VAT_PERCENT) // 100", "with_vat(1000)", lambda g: 1000 * (100 + g) // 100),
    ("FREE_SHIPPING_FROM", "# cents", 4000, 1000, "orders of {good} cents still pay shipping, but from {good} on it "
     "should be free", "def shipping(total):\n    # orders at or above the threshold ship free\n"
     "    return 0 if total >= FREE_SHIPPING_FROM else SHIPPING_CENTS", "shipping(FREE_SHIPPING_FROM)", lambda g: 0),
    ("SESSION_MINUTES", "# idle time before logout", 30, -15, "people get logged out after {bad} minutes idle instead "
     "of {good}", "def session_seconds():\n    return SESSION_MINUTES * 60", "session_seconds()", lambda g: g * 60),
    ("MAX_ITEMS", "# per order", 20, -10, "the cart stops taking items at {bad}, but {good} items per order are "
     "allowed",
     "def can_add(count):\n    \"\"\"Whether a cart holding `count` items may take one more.\"\"\"\n"
     "    return count < MAX_ITEMS", "can_add(MAX_ITEMS - 1)", lambda g: True),
]


@op("edit", "edit-py-constant", (2, 3, 4), "Python: editing one constant of a module", "sed -i", [
    "In {src}, {symptom}. Fix the constant responsible and nothing else.",
    "A customer noticed that {symptom}. It's a config constant in {src} that is off, not the logic. Could you "
    "correct that one value? The rest of the module must stay as it is, it was just reviewed.",
    "{symptom} - the value in {src} is wrong, fix it (just that line)",
    "Once {src} is right, it should no longer be the case that {symptom}; only the constant behind it changes.",
])
def _constant(c: Ctx) -> Case:
    src = c.src("py", ["shop", "pricing", "settings", "rules"])
    picked = c.pick(CONSTANTS)
    name, comment, good, off, symptom, _, call, value = picked
    bad = good + off
    lines = [f'"""Business rules for the {c.pick(["online shop", "web store", "staff portal"])}. '
             f'Reviewed {c.pick(["weekly", "monthly"])}."""', ""]
    consts = [(n, cm, g if n != name else bad) for n, cm, g, *_ in CONSTANTS] + [("SHIPPING_CENTS", "# flat rate", 495)]
    lines += [f"{n} = {v}  {cm}" for n, cm, v in consts]
    for *_, fn, _c, _v in CONSTANTS:
        lines += ["", ""] + fn.split("\n")
    idx = lines.index(f"{name} = {bad}  {comment}")
    checks = [(call.replace(name, str(good)) if "(" + name in call else call, value(good)), (name, good)]
    verify = (one_line(src, text_of(lines), idx, rf"{name}\s*=\s*{good}\b.*", f"{name} should be {good}") + "\n"
              + py_checks(src[:-3], checks, "after the fix"))
    return Case({src: text_of(lines)}, verify, f"sed -i 's/^{name} = {bad} /{name} = {good} /' {q(src)}",
                dict(src=src, symptom=symptom.format(good=good, bad=bad)))


# (function source with {op} and {n}, the right operator, the wrong one, the symptom, calls -> values at n,
# the range n is drawn from)
COMPARISONS = [
    ("def can_vote(age):\n    \"\"\"Whether a person of this age may vote.\"\"\"\n    return age {op} {n}", ">=", ">",
     "people who are exactly {n} are told they cannot vote, but {n} is old enough",
     lambda n: [(f"can_vote({n})", True), (f"can_vote({n - 1})", False), (f"can_vote({n + 5})", True)], (16, 21)),
    ("def strong_enough(password):\n    # the policy: at least {n} characters\n"
     "    return len(password) {op} {n}", ">=", ">",
     "a password of exactly {n} characters is rejected, though the policy says at least {n}",
     lambda n: [(f"strong_enough('x' * {n})", True), (f"strong_enough('x' * {n - 1})", False)], (8, 16)),
    ("def is_late(minutes):\n    \"\"\"Late means more than {n} minutes after the start.\"\"\"\n"
     "    return minutes {op} {n}", ">", ">=",
     "someone arriving exactly {n} minutes after the start is marked late, but only more than {n} counts",
     lambda n: [(f"is_late({n})", False), (f"is_late({n + 1})", True), ("is_late(0)", False)], (3, 15)),
    ("def in_stock(count):\n    return count {op} {n}", ">=", ">",
     "a product with exactly {n} left in stock shows as sold out (at least {n} means it is available)",
     lambda n: [(f"in_stock({n})", True), (f"in_stock({n - 1})", False)], (1, 3)),
]


@op("edit", "edit-py-comparison", (3, 4), "Python: fixing an off-by-one comparison", "sed -i", [
    "In {src}, {symptom}. Fix the comparison; change nothing else.",
    "Bug report from support: {symptom}. The check lives in {src}. Can you fix that one condition without "
    "touching the rest of the file? The other functions are fine.",
    "{symptom} ... its the comparison in {src}, fix it pls",
    "{src} should stop behaving like this: {symptom}. Only the faulty condition may change.",
])
def _comparison(c: Ctx) -> Case:
    src = c.src("py", ["rules", "checks", "policy", "validate"])
    which = c.rng.randrange(len(COMPARISONS))
    ns = [c.rng.randint(*t[-1]) for t in COMPARISONS]
    lines = [f'"""Checks used by the {c.pick(["sign-up form", "front desk", "shop"])}."""']
    for i, (fn, good, bad, *_) in enumerate(COMPARISONS):
        lines += ["", ""] + fn.format(op=bad if i == which else good, n=ns[i]).split("\n")
    fn, good, bad, symptom, calls, _ = COMPARISONS[which]
    broken = fn.format(op=bad, n=ns[which]).split("\n")[-1]
    idx = lines.index(broken)
    fixed = broken.replace(f" {bad} ", f" {good} ")
    verify = (one_line(src, text_of(lines), idx, None, "the comparison should change") + "\n"
              + py_checks(src[:-3], calls(ns[which]), "after the fix"))
    return Case({src: text_of(lines)}, verify, sed_edit(text_of(lines), idx, fixed, src),
                dict(src=src, symptom=symptom.format(n=ns[which])))


# (the good line, the typo'd line, what bash says about it)
TYPOS = [('echo "Order summary for $DAY"', 'ehco "Order summary for $DAY"', "ehco: command not found"),
         ("echo \"failed: $(grep -c FAILED \"$LOG\")\"", "echo \"failed: $(grpe -c FAILED \"$LOG\")\"",
          "grpe: command not found"),
         ('echo "log: $LOG"', 'echo "log: $LGO"', "LGO: unbound variable"),
         ("echo \"total: $(wc -l < \"$LOG\")\"", "echo \"total: $(wc -l < \"$LGO\")\"", "LGO: unbound variable")]


@op("edit", "edit-sh-typo", (2, 3, 4), "bash: reading an error message, fixing one line", "sed -i", [
    "{src} fails with \"{err}\". Fix the typo; leave the other lines alone.",
    "Our cron mail says {src} printed \"{src}: line {line}: {err}\" last night. I think it's just a typo from "
    "yesterday's edit. Could you fix it? Please don't touch anything else in the script.",
    "fix the typo in {src} ({err}), only that line",
    "{src} should run cleanly again (it stops with \"{err}\"), with all its other lines unchanged.",
])
def _typo(c: Ctx) -> Case:
    src = c.src("sh", ["summary", "report", "nightly", "orders"])
    log = c.pick(["orders.log", "today.log"])
    good, bad, err = c.pick(TYPOS)
    rows = [f"order {1000 + i} {c.pick(['OK', 'OK', 'FAILED'])}" for i in range(c.rng.randint(4, 9))]
    body = ["#!/bin/bash", f"# Summarise the orders (cron, {c.pick(['18:00', '23:30', '06:15'])}); "
                           f"owner: {c.pick(['dana', 'lee', 'sam'])}",
            "set -eu", f'LOG="{log}"', f"DAY={c.pick(['Monday', 'Friday', 'today'])}", "",
            *(t[0] for t in TYPOS), 'echo "done"']
    idx = body.index(good)
    lines = body[:idx] + [bad] + body[idx + 1:]
    day = body[4].split("=", 1)[1]
    expected = [f"Order summary for {day}", f"failed: {sum('FAILED' in r for r in rows)}", f"log: {log}",
                f"total: {len(rows)}", "done"]
    verify = (one_line(src, text_of(lines), idx, re.escape(good), f"line {idx + 1} should be {good}") + "\n"
              + AGENT_RUN + f"_r = run_as_agent(['bash', {src!r}])\n"
              f"check(_r.returncode == 0 and norm(_r.stdout) == {expected!r}, 'bash {src} should print ' + "
              f"repr({expected!r}) + ', it printed ' + repr(_r.stdout[-300:]) + ' ' + repr(_r.stderr[-200:]))")
    fix = f"sed -i '{idx + 1}s/.*/{good.replace('/', chr(92) + '/')}/' {q(src)}"
    return Case({src: text_of(lines), log: text_of(rows)}, verify, fix,
                dict(src=src, err=err, line=str(idx + 1)))
