"""The held-out evaluation set: generated from seeds disjoint from training, fixed at run start, never trained on.

Template hold-out (what makes the set predict transfer rather than template fit): the last phrasing of
every operation, and every phrasing of the operations marked `heldout=True` (`_ops.Op`), are generated
only for split "heldout"; training synthesis (split "train") never emits one (`heldout_pairs` lists
them). At levels 2-4 (`HELDOUT_LEVELS`, the default here) every held-out task is such a pair; levels 1
and 5 (spelled-out commands, the hand-written level-5 generators) only have disjoint seeds.

Seed scheme (see `families.seed_rng`): a task's randomness is `Random("split:family:level:seed:index")`.
Training synthesis uses split "train" with the iteration's seed; the held-out set uses split "heldout"
with `seed_base` (the run's seed). The two strings can never be equal, so no held-out stream is ever a
training stream. Because small levels have small content spaces, the same *content* could still be
drawn by both; task ids are content hashes, so `synthesize(..., exclude=heldout_ids(store, run))` skips
those, and the store refuses a training rollout of a held-out task (`Store.check_trainable`, triggers).
"""

from __future__ import annotations

from collections.abc import Iterable

from appliance.schemas import Split
from appliance.store import Store
from appliance.tasks.families import FAMILIES, all_ops, synthesize
from appliance.tasks.format import TaskSpec

HELDOUT_LEVELS = (2, 3, 4)


def heldout_pairs() -> set[tuple[str, int]]:
    """The (operation, phrasing index) pairs reserved for the held-out set."""
    return {(o.name, i) for o in all_ops() for i in o.heldout_phrasings()}


def heldout_operations() -> list[str]:
    """Operations held out whole (no phrasing of them is ever trained on)."""
    return sorted(o.name for o in all_ops() if o.heldout)


def heldout_tasks(families: Iterable[str] | None = None, levels: Iterable[int] = HELDOUT_LEVELS, n: int = 4,
                  seed_base: int | str = 0) -> list[TaskSpec]:
    """n held-out tasks per family and level; the same arguments always give the same tasks. At levels
    2-4 each is a held-out operation-phrasing pair, rendered without a hint."""
    out: list[TaskSpec] = []
    for name in families or FAMILIES:
        for level in levels:
            out += synthesize(name, level, n, seed=seed_base, split="heldout")
    return out


def fix_heldout(store: Store, run_id: str, specs: list[TaskSpec]) -> int:
    """Store the held-out set of a run (idempotent: a restarted run adds nothing); returns rows added."""
    added = 0
    for spec in specs:
        added += store.add_task(spec.task_row(run_id, Split.HELDOUT, task_id=spec.id))
    return added


def heldout_ids(store: Store, run_id: str | None = None) -> set[str]:
    return {t.id for t in store.tasks(run_id, split=Split.HELDOUT)}
