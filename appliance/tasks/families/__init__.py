"""Procedural task families: one module per family, each with `generate(level, rng) -> TaskSpec`.

Most of a family is a table of everyday command-line operations (`_ops.Op`: workspace, expected result,
verifier, reference solution, >= 3 phrasings, trap variants); `generate` also takes `split=` ("train"
never yields a held-out operation-phrasing pair) and `hint=` (the hint ladder, `_ops.HINTS`).

Level 1 spells out the exact command (the bundled 135M model has a signal only there); each level above
says less and asks more. Generation is a pure function of (family, level, seed), so a task pool can be
rebuilt from its seeds, and the training and held-out seed spaces never meet (see `seed_rng`).
"""

from __future__ import annotations

import random
from types import ModuleType

from appliance.errors import ApplianceError
from appliance.tasks.families import (
    answer,
    archive,
    chores,
    convert,
    data,
    edit,
    files,
    find,
    git,
    jsondata,
    pipeline,
    pyfix,
    replace,
    script,
    text,
)
from appliance.tasks.families._ops import HINTS, REGISTRY, Op, all_ops
from appliance.tasks.format import TaskSpec

FAMILIES: dict[str, ModuleType] = {m.FAMILY: m for m in (files, text, data, pyfix, pipeline, git, replace, script,
                                                          find, jsondata, archive, answer, chores, edit,
                                                          convert)}
LEVELS = (1, 2, 3, 4, 5)
SPLITS = ("train", "heldout")
__all__ = ["FAMILIES", "HINTS", "LEVELS", "REGISTRY", "SPLITS", "Op", "all_ops", "family", "generate", "seed_rng",
           "synthesize"]


def family(name: str) -> ModuleType:
    if name not in FAMILIES:
        raise ApplianceError(f"unknown task family {name!r}", f"choose one of: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def seed_rng(split: str, name: str, level: int, seed: int | str, index: int) -> random.Random:
    """The seed scheme. Every task's randomness comes from the string `split:family:level:seed:index`
    (Python seeds a Random from a string through SHA-512), so training ("train:...") and held-out
    ("heldout:...") streams are disjoint by construction whatever integers the callers pick."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    return random.Random(f"{split}:{name}:{level}:{seed}:{index}")


def generate(name: str, level: int, rng: random.Random, *, split: str = "train",
             hint: str | None = None) -> TaskSpec:
    """One task; `split="train"` never yields a held-out operation-phrasing pair, `hint` is one of
    `HINTS` ("tool", "partial", None). The same rng state with another hint gives the same task with
    that hint (meta["request_id"] is the unhinted task's id)."""
    if level not in LEVELS:
        raise ApplianceError(f"difficulty level {level} is outside 1..5", "pass --level 1..5")
    if split not in SPLITS:
        raise ApplianceError(f"split {split!r} is unknown", f"use one of: {', '.join(SPLITS)}")
    if hint not in HINTS:
        raise ApplianceError(f"hint {hint!r} is unknown", "use tool, partial or none")
    spec = family(name).generate(level, rng, split=split, hint=hint)
    spec.check()
    return spec


def synthesize(name: str, level: int, n: int, *, seed: int | str = 0, split: str = "train",
               exclude: set[str] | None = None, max_tries: int | None = None,
               hint: str | None = None) -> list[TaskSpec]:
    """n distinct tasks of one family and level; ids in `exclude` (e.g. the held-out set) are skipped.
    `hint` renders them at a rung of the hint ladder; the seed does not depend on it, so the same
    arguments with another hint give the same tasks, hinted differently.

    Small levels have small content spaces, so fewer than n may come back after `max_tries` draws."""
    seen = set(exclude or ())
    out: list[TaskSpec] = []
    for i in range(max_tries or 20 * n):
        if len(out) >= n:
            break
        spec = generate(name, level, seed_rng(split, name, level, seed, i), split=split, hint=hint)
        if spec.id in seen:
            continue
        seen.add(spec.id)
        spec.meta.update(split=split, seed=str(seed), index=i)
        out.append(spec)
    return out
