"""Dressing training requests: styles drawn, facts and quotes untouched, the held-out set unchanged."""

from __future__ import annotations

import random
import re

import pytest

from appliance.tasks.families import FAMILIES, _ops, all_ops, synthesize
from appliance.tasks.families._dress import ASIDES, REASONS, dress, typo
from appliance.tasks.heldout import heldout_tasks


def test_a_typo_swaps_two_letters_of_one_plain_word_and_nothing_quoted() -> None:
    template = 'Sort "the file" of {src} with `sort -n` and write everything into {out}.'
    swapped_at = set()
    for seed in range(60):
        got = typo(template, random.Random(seed))
        assert got != template and sorted(got) == sorted(template)
        for kept in ('"the file"', "{src}", "`sort -n`", "{out}"):
            assert kept in got
        diff = [i for i, (a, b) in enumerate(zip(got, template)) if a != b]
        assert len(diff) == 2 and diff[1] == diff[0] + 1
        assert template[diff[0] - 1].isalpha() and template[diff[1] + 1].isalpha()  # inner letters only
        swapped_at.add(diff[0])
    assert len(swapped_at) >= 3


def test_a_template_of_placeholders_only_has_no_typo() -> None:
    assert typo("{src} -> {out} `cut -c1-5`", random.Random(0)) == "{src} -> {out} `cut -c1-5`"


def test_every_op_phrasing_dresses_into_a_request_with_every_fact_unchanged() -> None:
    styles = set()
    for o in all_ops():
        for i, phrasing in enumerate(o.phrasings):
            rng = random.Random(f"{o.name}:{i}")
            case = _ops.draw_case(o, rng, None, phrasing)
            template, before, after = dress(phrasing, rng)
            request = template.format(**case.facts)
            for name in re.findall(r"\{(\w+)\}", phrasing):
                assert case.facts[name] in request, (o.name, i, name)
            assert before in ("", *REASONS) and after in ("", *ASIDES)
            styles.add((bool(before), bool(after), template != phrasing))
    assert len(styles) >= 5


def said_around(instruction: str) -> bool:
    """A reason before the request or a remark after it (terse and typo styles are not seen here)."""
    return instruction.startswith(tuple(REASONS)) or instruction.split("\n")[0].endswith(tuple(ASIDES))


def test_about_half_the_training_requests_are_dressed_and_none_held_out() -> None:
    train = [t for f in FAMILIES for lvl in (2, 3, 4) for t in synthesize(f, lvl, 10, seed=3)]
    dressed = [t for t in train if said_around(t.instruction)]
    assert 0.1 < len(dressed) / len(train) < 0.6, len(dressed) / len(train)
    held = heldout_tasks(list(FAMILIES), [2, 3, 4], 2, seed_base="dress")
    assert not any(said_around(t.instruction) for t in held)


def test_the_held_out_set_is_the_same_whatever_the_dressing_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    before = [(t.id, t.instruction) for t in heldout_tasks(list(FAMILIES), [2, 3, 4], 2, seed_base="dress")]
    monkeypatch.setattr(_ops, "DRESS_RATE", 1.0)
    after = [(t.id, t.instruction) for t in heldout_tasks(list(FAMILIES), [2, 3, 4], 2, seed_base="dress")]
    assert before == after
