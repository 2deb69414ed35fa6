"""What the family modules share: word pools, the verifier prelude, the level-1 phrasing, and `make`."""

from __future__ import annotations

import random
import shlex
from typing import Any

from appliance.tasks.format import Limits, TaskSpec, content_id

WORDS = [
    "apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "rocket", "garden",
    "silver", "forest", "candle", "window", "bridge", "orange", "planet", "violet", "harbor", "meadow",
    "pencil", "copper", "falcon", "island", "jacket", "kettle", "ladder", "magnet", "needle", "oyster",
    "pepper", "quartz", "saddle", "tunnel", "velvet", "walnut", "yellow", "zebra", "anchor", "basket",
    "cactus", "dragon", "engine", "feather", "glacier", "hammer", "igloo", "jungle", "koala", "lantern",
]
NAMES = ["notes", "report", "data", "todo", "summary", "draft", "list", "memo", "log", "ideas",
         "plan", "items", "words", "output", "result", "record", "entry", "story", "diary", "sheet"]
PEOPLE = ["Ann", "Bob", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivan", "Jade", "Kim", "Leo",
          "Mia", "Ned", "Omar", "Pia", "Quin", "Rosa", "Sam", "Tara"]
CITIES = ["Oslo", "Lima", "Rome", "Kyiv", "Pune", "Cairo", "Quito", "Perth", "Turin", "Accra"]


def spelled_out(command: str) -> str:
    """Level 1: the instruction is the command itself, in the fenced bash block the harness asks for."""
    return f"Run this command:\n```bash\n{command}\n```"


def q(s: str) -> str:
    return shlex.quote(s)


def pick(rng: random.Random, pool: list[str], k: int) -> list[str]:
    return rng.sample(pool, k)


# The verifier prelude: checks accumulate, the verdict is all-pass, the score the passed fraction (a
# denser reward than pass/fail). Text comparisons ignore trailing spaces and trailing blank lines, since a
# missing final newline is not what a task is about.
PRELUDE = r'''
import json, os, subprocess, sys
_checks = []
def check(ok, what):
    _checks.append((bool(ok), what))
    return bool(ok)
def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
def norm(text):
    if text is None:
        return None
    out = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while out and out[-1] == "":
        out.pop()
    return out
def text_is(path, expected):
    got = read(path)
    return check(norm(got) == norm(expected), f"{path} should be {expected!r}, found {got!r}"[:400])
def run(cmd, stdin=None, timeout=20, env=None):
    try:
        return subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, input=stdin,
                              timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 124, "", str(e))
def done():
    ok = sum(1 for c, _ in _checks if c)
    for c, what in _checks:
        if not c:
            print("FAIL:", what)
    score = f"SCORE={ok / max(len(_checks), 1):.3f}"
    print(score)
    try:
        os.write(3, (score + "\n").encode())  # the verdict channel's private score descriptor
    except OSError:
        pass
    sys.exit(0 if _checks and ok == len(_checks) else 1)
'''


# Code under test (a script the agent wrote, its module) runs as the agent's uid, never as the verifier's:
# `run_as_agent` (appliance_check, in the image) asks the verifier's launcher to run it, so that code can
# neither kill nor stop the verifier nor change a file while the verifier reads it. Same call as `run`.
AGENT_RUN = "from appliance_check import run_as_agent\n"


def verifier(body: str) -> str:
    return PRELUDE + "\n" + body.strip("\n") + "\ndone()\n"


def make(family: str, level: int, variant: str, *, instruction: str, files: dict[str, str], verify: str,
         solution: str, setup: str = "", protected: list[str] | None = None, max_turns: int | None = None,
         command_timeout_s: float = 30.0, meta: dict[str, Any] | None = None) -> TaskSpec:
    """A procedural task; the id is derived from its content, so regenerating it is idempotent."""
    verify_src = verifier(verify)
    files = dict(files)
    tid = content_id(family, level, instruction, repr(sorted(files.items())), setup, verify_src)
    return TaskSpec(
        id=tid, family=family, difficulty=level, instruction=instruction, verify=verify_src,
        solution=solution.strip("\n") + "\n", files=files, setup=setup, verify_lang="python",
        protected=list(protected or []), source="procedural",
        limits=Limits(max_turns=max_turns or 4 + 2 * level, command_timeout_s=command_timeout_s, setup_timeout_s=30.0),
        meta={"generator": f"appliance.tasks.families.{family}", "variant": variant, **(meta or {})},
    )
