"""The transfer dev set: its composition, its independence from the families, and real validation.

The dev set is only worth anything if it was written apart from the families: a dev task worded like a
family task would measure template fit, not transfer. So no dev task may be a near-duplicate (the pool's
fingerprint) of a family task at levels 1-4, in either split, and no dev instruction may share a run of
eight words with one (numbers, which are facts, not wording, do not count as words of a run's phrasing).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import pytest

from appliance.config import Settings
from appliance.schemas import Split
from appliance.tasks.devset import BATCHES, CATEGORIES, category, devset_tasks
from appliance.tasks.families import FAMILIES, synthesize
from appliance.tasks.pool import fingerprint

MINIMUM = {"first": ({"chore": 20, "multistep": 12, "answer": 10, "edit": 10, "git": 8}, 60),
           "second": ({"chore": 8, "multistep": 6, "answer": 5, "edit": 4, "git": 3}, 30)}
REGISTERS = {"first": (10, 20, 4), "second": (6, 12, 4)}  # at least: terse, chatty, typo
SHINGLE = 8  # words: a shared run this long is a shared phrasing, shorter ones are everyday English


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", re.sub(r"\d+", "0", text.lower()))


def shingles(text: str) -> set[tuple[str, ...]]:
    """Runs of SHINGLE words with at least half of them words, not numbers: "json from 0 0 0 to 0 0" is two
    version numbers, shared by any two requests to bump one."""
    w = words(text)
    runs = (tuple(w[i:i + SHINGLE]) for i in range(len(w) - SHINGLE + 1))
    return {r for r in runs if sum(x != "0" for x in r) >= SHINGLE // 2}


@cache
def family_tasks() -> tuple:
    out = []
    for family in FAMILIES:
        for level in (1, 2, 3, 4):
            for split in ("train", "heldout"):
                out += synthesize(family, level, 12, seed=7, split=split)
    return tuple(out)


@pytest.mark.parametrize("batch", BATCHES)
def test_the_dev_set_has_every_category_in_its_planned_size(batch: str) -> None:
    specs = devset_tasks(batch)
    counts = Counter(category(s.family) for s in specs)
    assert set(counts) == set(CATEGORIES)
    least, total = MINIMUM[batch]
    for cat, n in least.items():
        assert counts[cat] >= n, (cat, counts[cat])
    assert len(specs) >= total
    assert len({s.id for s in specs}) == len(specs)


def test_the_batches_share_no_task() -> None:
    ids = [s.id for batch in BATCHES for s in devset_tasks(batch)]
    assert len(set(ids)) == len(ids)
    with pytest.raises(ValueError, match="no dev-set batch"):
        devset_tasks("third")


@pytest.mark.parametrize("batch", BATCHES)
def test_every_dev_task_names_its_source_and_register_and_stays_small(batch: str) -> None:
    for s in devset_tasks(batch):
        assert s.meta["split"] == Split.DEV and s.meta["category"] == category(s.family)
        assert s.meta["source_page"].strip(), s.id
        assert s.meta["register"] in ("terse", "chatty", "typo"), s.id
        assert s.family.startswith("dev-") and s.family not in FAMILIES
        assert sum(len(v) for v in s.files.values()) + len(s.setup) < 100_000, s.id
        assert "curl" not in s.solution and "wget" not in s.solution, s.id  # no network


@pytest.mark.parametrize("batch", BATCHES)
def test_requests_come_in_several_registers(batch: str) -> None:
    registers = Counter(s.meta["register"] for s in devset_tasks(batch))
    terse, chatty, typo = REGISTERS[batch]
    assert registers["terse"] >= terse and registers["chatty"] >= chatty and registers["typo"] >= typo, registers


@pytest.mark.parametrize("batch", BATCHES)
def test_no_dev_task_is_a_near_duplicate_of_a_family_task(batch: str) -> None:
    family_prints = {fingerprint(t) for t in family_tasks()}
    family_instructions = {" ".join(words(t.instruction)) for t in family_tasks()}
    for s in devset_tasks(batch):
        assert fingerprint(s) not in family_prints, s.id
        assert " ".join(words(s.instruction)) not in family_instructions, s.id


@pytest.mark.parametrize("batch", BATCHES)
def test_no_dev_instruction_shares_a_phrasing_with_the_families(batch: str) -> None:
    family_runs: set[tuple[str, ...]] = set()
    for t in family_tasks():
        family_runs |= shingles(t.instruction)
    shared = {s.id: sorted(" ".join(r) for r in shingles(s.instruction) & family_runs)
              for s in devset_tasks(batch)}
    assert not {k: v for k, v in shared.items() if v}


@pytest.mark.slow  # real Podman
@pytest.mark.timeout(900)
def test_a_sample_of_every_category_passes_agent_free_validation(sandbox_settings: Settings) -> None:
    from appliance.tasks.validate import validate_many

    by_cat: dict[str, list] = {}
    for s in devset_tasks("first") + devset_tasks("second"):
        by_cat.setdefault(category(s.family), []).append(s)
    sample = [t for cat in CATEGORIES for t in by_cat[cat][::4]]  # every fourth: 25 tasks, about a minute
    results = validate_many(sandbox_settings, sample, parallel=4)
    bad = {s.id: v.reason for s, v in zip(sample, results) if not v.ok}
    assert not bad


def test_the_store_refuses_training_on_the_dev_set(store) -> None:
    import sqlite3

    from appliance.errors import StoreError
    from appliance.schemas import Rollout, RolloutStatus, Task, TaskStatus
    from appliance.tasks.devset import fix_devset

    store.create_run("r1", {})
    assert fix_devset(store, "r1") == len(devset_tasks())
    assert fix_devset(store, "r1") == 0  # a restarted run adds nothing
    (s,) = synthesize("text", 2, 1)
    store.add_task(Task(s.id, "r1", s.family, s.difficulty, s.source, Split.TRAIN, TaskStatus.PROPOSED, s.to_spec()))
    dev = sorted(t.id for t in store.tasks("r1", split=Split.DEV))
    assert [t.id for t in store.training_tasks("r1")] == [s.id]
    store.check_trainable([s.id])
    with pytest.raises(StoreError, match="dev"):
        store.check_trainable([s.id, dev[0]])
    store.add_rollout(Rollout("ev1", "r1", dev[0], None, 0, "builtin", 0, RolloutStatus.PENDING, purpose="eval"))
    with pytest.raises(sqlite3.IntegrityError, match="dev-set"):
        store.add_rollout(Rollout("tr1", "r1", dev[0], None, 0, "builtin", 0, RolloutStatus.PENDING, purpose="train"))
    with pytest.raises(sqlite3.IntegrityError, match="dev-set"):
        with store.write() as c:
            c.execute("UPDATE tasks SET split = 'train' WHERE id = ?", (dev[0],))
    with pytest.raises(sqlite3.IntegrityError, match="dev-set"):
        with store.write() as c:
            c.execute("INSERT INTO demonstrations (run_id, task_id, family, difficulty, origin, digest, messages,"
                      " token_ids, mask, created_at)"
                      " VALUES ('r1', ?, 'dev-chore', 2, 'reference', 'd', '[]', x'', x'', 0)",
                      (dev[0],))
