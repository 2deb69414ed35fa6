"""Composition: two validated training tasks made into one multi-step request, the second synthesis routine.

Self-proposal asks the policy to write tasks, and the bundled model writes none that parse (0 of 14 at
96 tokens and at 512 tokens, temperature 0.7: `scripts/bench propose`). Composition needs no model: a
request that asks for two things the pool already holds, in one of a few registers, whose reference is
the two references in turn and whose verifier passes when both parts' verifiers pass. The agent has to
do both, in order, without being told which tools: the multi-step chores it fails on independent work.

The composite verifier is bash. Each part runs as its own child through the execute-only interpreters
of the verdict channel (`sandbox.judge`), so the code a part runs can neither read nor rewrite a part's
status; a part's source reaches it as the channel's own does, on fd 4 (a pipe from the composite's
memory), never in its argv, so code one part runs cannot read what another part expects; each part's
score descriptor goes to /dev/null and the composite writes its own (the share of parts passed) to fd 3.
Validation decides as for any task: untouched fails, the reference passes (two parts whose workspaces or
commands collide fail here and are never trained).
"""

from __future__ import annotations

import hashlib
import json
import random
import shlex

from appliance.sandbox.judge import INTERPRETERS
from appliance.tasks.format import MAX_TIMEOUT_S, MAX_TURNS, Limits, TaskSpec

PART = {lang: shlex.join(argv) for lang, argv in INTERPRETERS.items()}
REGISTERS = [
    "{a}\n{b}",
    "Two things, please. First: {a} Then: {b}",
    "1. {a}\n2. {b}",
    "{a} Once that is done: {b}",
]


def composable(spec: TaskSpec) -> bool:
    """A part may be any validated task but a question (its answer is one text), a composite already, or
    one that describes its input instead of naming it ("the only .txt file here": the other part's files
    would make that untrue)."""
    return (not spec.answer and "composed_of" not in spec.meta and spec.verify_lang in PART
            and "the only " not in spec.instruction.lower())


def compose(a: TaskSpec, b: TaskSpec, rng: random.Random) -> TaskSpec | None:
    """One task asking for `a` and then `b`; None when they cannot share a workspace (a path in both)."""
    if not (composable(a) and composable(b)) or a.id == b.id or set(a.files) & set(b.files):
        return None
    register = rng.randrange(len(REGISTERS))
    instruction = REGISTERS[register].format(a=a.instruction.strip(), b=b.instruction.strip())
    setup = "\n".join(f"(\n{s.setup.strip()}\n)" for s in (a, b) if s.setup.strip())
    digest = hashlib.sha256(json.dumps([a.id, b.id, register]).encode()).hexdigest()[:12]
    return TaskSpec(
        id=f"cx-{a.family}-{max(a.difficulty, b.difficulty)}-{digest}", family=a.family,
        difficulty=max(a.difficulty, b.difficulty), instruction=instruction, verify=verifier([a, b]),
        solution=a.solution.rstrip("\n") + "\n" + b.solution.rstrip("\n") + "\n", files={**a.files, **b.files},
        setup=setup + "\n" if setup else "", verify_lang="bash", protected=sorted({*a.protected, *b.protected}),
        source=a.source, limits=composed_limits(a.limits, b.limits),
        meta={"composed_of": [a.id, b.id], "families": [a.family, b.family], "register": register})


def verifier(parts: list[TaskSpec]) -> str:
    """Bash that runs each part's verifier as its own judged child and passes when all of them pass."""
    lines = ["__ok=0"]
    for i, p in enumerate(parts):
        # (a process substitution is a pipe from a fork of this non-dumpable shell: no file, no argv)
        lines.append(f"__part{i}={shlex.quote(p.verify)}")
        lines.append(f"{PART[p.verify_lang]} 4< <(printf %s \"$__part{i}\") 3>/dev/null </dev/null "
                     "&& __ok=$((__ok + 1))")
    n = len(parts)
    lines += [(f'__m=$(( __ok * 1000 / {n} )); printf "SCORE=%d.%03d\\n" $(( __m / 1000 )) $(( __m % 1000 ))'
               ' >&3 2>/dev/null'),
              f'echo "parts passed: $__ok of {n}"', f"[ $__ok -eq {n} ]"]
    return "\n".join(lines) + "\n"


def compose_round(pool: list[TaskSpec], n: int, rng: random.Random, exclude: set[str]) -> list[TaskSpec]:
    """Up to `n` composites of distinct pairs drawn from `pool` (ids in `exclude` are skipped)."""
    parts = [s for s in pool if composable(s)]
    out: list[TaskSpec] = []
    for _ in range(20 * n):
        if len(out) >= n or len(parts) < 2:
            break
        a, b = rng.sample(parts, 2)
        spec = compose(a, b, rng)
        if spec is not None and spec.id not in exclude:
            exclude.add(spec.id)
            out.append(spec)
    return out


def composed_limits(a: Limits, b: Limits) -> Limits:
    """Turns for both parts; a command may need the longer part's limit; setup and verifier run both parts'."""
    return Limits(min(MAX_TURNS, a.max_turns + b.max_turns),
                  max(a.command_timeout_s, b.command_timeout_s),
                  min(MAX_TIMEOUT_S, a.setup_timeout_s + b.setup_timeout_s),
                  min(MAX_TIMEOUT_S, a.verifier_timeout_s + b.verifier_timeout_s))
