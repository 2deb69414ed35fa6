"""The operation table: breadth, phrasings, traps, the hint ladder, and the template hold-out."""

from __future__ import annotations

import random
import shlex
from collections import Counter

import pytest

from appliance.tasks.families import FAMILIES, HINTS, LEVELS, REGISTRY, all_ops, generate, synthesize
from appliance.tasks.families._ops import GENERIC_TRAPS, pairs, render
from appliance.tasks.heldout import HELDOUT_LEVELS, heldout_operations, heldout_pairs, heldout_tasks


def test_at_least_sixty_operations_with_three_phrasings_and_a_source() -> None:
    ops = all_ops()
    assert len(ops) >= 60 and len({o.name for o in ops}) == len(ops)
    for o in ops:
        assert len(set(o.phrasings)) >= 3 and o.source and o.tool, o.name
        assert o.family in FAMILIES and set(o.levels) <= {1, 2, 3, 4}, o.name


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_has_train_and_heldout_pairs_at_levels_two_to_four(name: str) -> None:
    for level in HELDOUT_LEVELS:
        assert pairs(name, level, "train") and pairs(name, level, "heldout"), (name, level)


def test_every_phrasing_renders_with_its_facts() -> None:
    for o in all_ops():
        for i in range(len(o.phrasings)):
            spec = render(o, i, max(o.levels), random.Random(f"{o.name}:{i}"))
            assert "{" not in spec.instruction.split("\n")[0] or "{" in o.phrasings[i].replace("{", ""), \
                spec.instruction
            assert spec.meta["operation"] == o.name and spec.meta["phrasing"] == i


def test_level_one_operations_are_one_command() -> None:
    for o in all_ops():
        if 1 in o.levels:
            spec = render(o, 0, 1, random.Random(o.name))
            assert "\n" not in spec.solution.strip() and spec.instruction.startswith("Run this command:"), o.name


def test_training_never_emits_a_heldout_pair() -> None:
    held = heldout_pairs()
    seen: Counter = Counter()
    for name in FAMILIES:
        for level in LEVELS:
            for hint in HINTS if level > 1 else (None,):
                for spec in synthesize(name, level, 25, seed="t", hint=hint):
                    key = (spec.meta["operation"], spec.meta["phrasing"])
                    assert key not in held, key
                    assert spec.meta["operation"] not in heldout_operations()
                    seen[key[0]] += 1
    assert len(seen) >= 60


def test_heldout_set_is_made_of_heldout_pairs_only() -> None:
    held = heldout_pairs()
    specs = heldout_tasks(n=6, seed_base="h")
    assert {s.difficulty for s in specs} == set(HELDOUT_LEVELS) and len(specs) == 6 * 3 * len(FAMILIES)
    assert all((s.meta["operation"], s.meta["phrasing"]) in held for s in specs)
    assert all(s.meta["hint"] == "" for s in specs)
    train = {(s.meta["operation"], s.meta["phrasing"]) for n in FAMILIES for lvl in HELDOUT_LEVELS
             for s in synthesize(n, lvl, 25, seed="x")}
    assert not train & {(s.meta["operation"], s.meta["phrasing"]) for s in specs}
    # whole held-out operations exist, and every op keeps at least two phrasings for training
    assert len(heldout_operations()) >= 5
    assert all(len(o.phrasings) - len(o.heldout_phrasings()) >= 2 for o in all_ops() if not o.heldout)


def test_hint_ladder_renders_the_same_task() -> None:
    for name in FAMILIES:
        bare = synthesize(name, 3, 6, seed="l")
        tool = synthesize(name, 3, 6, seed="l", hint="tool")
        part = synthesize(name, 3, 6, seed="l", hint="partial")
        for b, t, p in zip(bare, tool, part):
            if b.meta["phrasing"] == -1:
                continue
            assert b.meta["request_id"] == b.id == t.meta["request_id"] == p.meta["request_id"]
            assert t.id != b.id and t.instruction.startswith(b.instruction) and "Hint:" not in b.instruction
            assert f"`{t.meta['tool']}`" in t.instruction and "starts like this" in p.instruction
            assert (t.meta["hint"], p.meta["hint"]) == ("tool", "partial") and t.solution == b.solution


def test_generic_traps_do_what_they_say() -> None:
    found: dict[str, int] = Counter()
    for o in all_ops():
        for trap in o.traps:
            spec = render(o, 0, 3, random.Random(f"trap:{o.name}"), trap=trap)
            found[trap] += 1
            assert spec.meta["trap"] == trap and spec.limits.max_turns == 12
            if trap == "spaces":
                assert any(" " in p for p in spec.files), o.name
            elif trap == "gzip":
                assert "gzip -n" in spec.setup and spec.solution.startswith("gunzip -k"), o.name
            elif trap == "missing-dir":
                assert spec.solution.startswith("mkdir -p "), o.name
            elif trap == "subdir":  # everything in one folder the request names; the reference goes there
                d = spec.solution.split("\n", 1)[0].removeprefix("cd ")
                assert spec.solution.startswith(f"cd {d}\n") and f"{d}/" in spec.instruction, o.name
                assert all(p.startswith(f"{d}/") for p in spec.files) and f"os.chdir({d!r})" in spec.verify, o.name
                assert "this directory" not in spec.instruction, o.name
            if trap in ("gzip", "missing-dir", "subdir"):  # the obvious attempt is the solution without the trap's fix
                assert spec.meta["first_attempt"] \
                    and spec.solution.rstrip().endswith(spec.meta["first_attempt"].rstrip()), o.name
            if trap == "spaces" and "first_attempt" in spec.meta:
                spaced = next(p for p in spec.files if " " in p)
                quoted = shlex.quote(spaced)  # the attempt leaves out the quotes the solution has
                assert quoted in spec.solution and quoted not in spec.meta["first_attempt"], o.name
            elif trap == "absent":
                assert f"`{o.absent}`" in spec.instruction, o.name
    assert set(GENERIC_TRAPS) <= set(found) and sum(found.values()) >= 100


def test_trap_share_grows_with_the_level() -> None:
    share = {}
    for level in (2, 4):
        specs = [s for n in ("text", "data", "json") for s in synthesize(n, level, 40, seed="share")]
        share[level] = sum(bool(s.meta.get("trap")) for s in specs) / len(specs)
    assert 0 < share[2] < share[4]
    # level 5 of a family without a hand-written level 5: an operation with a trap, every time
    assert all(s.meta["trap"] for s in synthesize("json", 5, 20, seed="share"))


def test_contents_and_names_vary() -> None:
    specs = [s for n in ("text", "data", "json", "files") for s in synthesize(n, 3, 40, seed="v")]
    contents = " ".join(t for s in specs for t in s.files.values())
    assert any(ch in contents for ch in ",.;!?") and max(len(line.split()) for line in contents.split("\n")) >= 4
    assert sum("the only ." in s.instruction for s in specs) >= 3
    heads = {s.files[p].split("\n", 1)[0] for s in specs for p in s.files if p.endswith(".csv")}
    assert len(heads) >= 8  # column names and orders vary


def test_generation_is_deterministic_with_split_and_hint() -> None:
    for name in REGISTRY:
        a = generate(name, 3, random.Random("d"), split="heldout", hint="partial")
        assert a == generate(name, 3, random.Random("d"), split="heldout", hint="partial")
