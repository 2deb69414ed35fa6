"""The transfer dev set: everyday tasks written independently of the procedural families, never trained on.

Each task is one single-file task (`*.toml`, docs/TASKS.md) in this folder, family `dev-<category>`, with
`meta.source_page` naming the man or info page whose EXAMPLES it was derived from (Debian's
/usr/share/man and /usr/share/info) and `meta.register` the request's register (terse, chatty, typo).
Its wording, files and checks come from those pages, not from `appliance/tasks/families`; the families
never take a phrasing from here (tests/tasks/test_devset.py checks that no dev task is a near-duplicate
of any family task at levels 1-4). It exists to choose recipes: the EVALUATE phase measures it beside the
held-out set (`appliance.evaluate.evaluate_devset`), and the store refuses it for training as it refuses
held-out tasks (split `dev`: `Store.check_trainable` and the m010 triggers).

Two batches: "first" (this folder, 66 tasks) and "second" (`second/`, written later by someone who had not
read the families, from man and info pages the first batch did not use). The first batch's reference
commands were read when the `convert` family's chapters were chosen; the second's never were, so it is the
check of transfer to tools and wording the families were not chosen by. `evaluation.devset_batch` picks the
one a run measures (a run keeps the batch it started with: `fix_devset` stores it once).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from appliance.schemas import Split
from appliance.store import Store
from appliance.tasks.format import TaskSpec, load_task

DEVSET_DIR = Path(__file__).parent
BATCHES = {"first": DEVSET_DIR, "second": DEVSET_DIR / "second"}
CATEGORIES = ("chore", "multistep", "answer", "edit", "git")  # family = "dev-" + category


def category(family: str) -> str:
    return family.removeprefix("dev-")


@cache
def _load(batch: str) -> tuple[TaskSpec, ...]:
    if batch not in BATCHES:
        raise ValueError(f"no dev-set batch {batch!r}: choose one of {', '.join(BATCHES)}")
    return tuple(load_task(p) for p in sorted(BATCHES[batch].glob("*.toml")))


def devset_tasks(batch: str = "first") -> list[TaskSpec]:
    """Every task of a dev-set batch, in file-name order (fresh copies: callers may change them)."""
    return [TaskSpec.from_spec(s.to_spec()) for s in _load(batch)]


def fix_devset(store: Store, run_id: str, batch: str = "first") -> int:
    """Store a batch of the dev set for a run, once (idempotent, like `heldout.fix_heldout`); returns rows
    added."""
    if store.tasks(run_id, split=Split.DEV):
        return 0
    added = 0
    for spec in devset_tasks(batch):
        added += store.add_task(spec.task_row(run_id, Split.DEV))
    return added
