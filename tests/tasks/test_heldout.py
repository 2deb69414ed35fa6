"""The held-out set: fixed by its seed, disjoint from training, and refused by the store for training."""

from __future__ import annotations

import sqlite3

import pytest

from appliance.errors import StoreError
from appliance.schemas import Rollout, RolloutStatus, Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks.families import FAMILIES, synthesize
from appliance.tasks.heldout import fix_heldout, heldout_ids, heldout_tasks


def test_heldout_set_is_fixed_by_its_seed() -> None:
    a = heldout_tasks(n=2, seed_base=7)
    assert [s.id for s in a] == [s.id for s in heldout_tasks(n=2, seed_base=7)]
    assert len(a) == 2 * 3 * len(FAMILIES)  # levels 2-4 by default
    assert {s.id for s in a} != {s.id for s in heldout_tasks(n=2, seed_base=8)}


def test_training_synthesis_skips_heldout_content(store: Store) -> None:
    held = heldout_tasks(["files"], [1], n=20)
    assert fix_heldout(store, "r1", held) == 20
    assert fix_heldout(store, "r1", held) == 0  # a restarted run adds nothing
    train = synthesize("files", 1, 200, seed=0, exclude=heldout_ids(store))
    assert not {s.id for s in train} & {s.id for s in held}


def test_the_store_refuses_training_on_heldout(store: Store) -> None:
    fix_heldout(store, "r1", heldout_tasks(["text"], [2], n=2))
    train = synthesize("text", 2, 2)
    for s in train:
        store.add_task(Task(s.id, "r1", s.family, s.difficulty, s.source, Split.TRAIN, TaskStatus.PROPOSED,
                            s.to_spec()))
    held_ids = heldout_ids(store, "r1")
    assert {t.id for t in store.training_tasks("r1")} == {s.id for s in train}
    assert not held_ids & {t.id for t in store.training_tasks("r1")}
    store.check_trainable([s.id for s in train])
    with pytest.raises(StoreError, match="held-out"):
        store.check_trainable([train[0].id, *held_ids])
    held = sorted(held_ids)[0]
    # The database itself refuses a training rollout of a held-out task; eval rollouts are fine.
    store.add_rollout(Rollout("ev1", "r1", held, None, 0, "builtin", 0, RolloutStatus.PENDING, purpose="eval"))
    with pytest.raises(sqlite3.IntegrityError, match="held-out"):
        store.add_rollout(Rollout("tr1", "r1", held, None, 0, "builtin", 0, RolloutStatus.PENDING, purpose="train"))
    with pytest.raises(sqlite3.IntegrityError, match="held-out"):
        with store.write() as c:
            c.execute("UPDATE tasks SET split = 'train' WHERE id = ?", (held,))
