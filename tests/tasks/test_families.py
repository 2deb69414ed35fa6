"""Procedural families: seeded, in range, level 1 spells the command out, held-out seeds disjoint."""

from __future__ import annotations

import random

import pytest

from appliance.tasks.families import FAMILIES, LEVELS, generate, seed_rng, synthesize


def test_at_least_eight_families() -> None:
    assert len(FAMILIES) >= 8


@pytest.mark.parametrize("name", list(FAMILIES))
def test_generation_is_a_function_of_the_seed(name: str) -> None:
    for level in LEVELS:
        a = generate(name, level, random.Random(f"x{level}"))
        b = generate(name, level, random.Random(f"x{level}"))
        assert a == b and a.difficulty == level and a.family == name and a.verify and a.solution


@pytest.mark.parametrize("name", list(FAMILIES))
def test_level_one_spells_out_the_command(name: str) -> None:
    for spec in synthesize(name, 1, 20):
        command = spec.instruction.split("```bash\n", 1)[1].split("\n```")[0]
        assert spec.instruction.startswith("Run this command:")
        assert command.strip() == spec.solution.strip()  # the reference solution is the spelled-out command


@pytest.mark.parametrize("name", list(FAMILIES))
def test_fifty_distinct_tasks_per_level(name: str) -> None:
    for level in LEVELS:
        specs = synthesize(name, level, 50)
        assert len({s.id for s in specs}) == 50


def test_train_and_heldout_streams_differ() -> None:
    assert seed_rng("train", "files", 1, 0, 0).random() != seed_rng("heldout", "files", 1, 0, 0).random()
    train = {s.id for s in synthesize("text", 3, 30, seed=0)}
    held = {s.id for s in synthesize("text", 3, 30, seed=0, split="heldout")}
    kept = synthesize("text", 3, 30, seed=0, exclude=held)
    assert not held & {s.id for s in kept} and train != held


def test_an_output_never_takes_an_inputs_name() -> None:
    # `wc -w < words.txt > words.txt` empties words.txt before counting it: the sweep once drew exactly that
    from appliance.tasks.families._ops import Ctx

    ctx = Ctx(random.Random(0), None)
    src = ctx.src("txt", stems=["words"])
    assert src == "words.txt" and ctx.out("words.txt") == "out-words.txt" and ctx.out("count.txt") == "count.txt"
