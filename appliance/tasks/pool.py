"""The task pool's rules that need no sandbox: near-duplicates by fingerprint, and the learnable band an
agent-based verdict puts a valid task in (`record_band` stores it). Agent-free validation, which needs
sandboxes, is `appliance.tasks.validate`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from appliance.schemas import TaskStatus
from appliance.tasks.format import TaskSpec


# --- near-duplicates ---------------------------------------------------------------------------------
def fingerprint(spec: TaskSpec) -> str:
    """Instruction + workspace files, lowercased, digits folded to 0 and whitespace collapsed."""
    def norm(s: str) -> str:
        return " ".join(re.sub(r"\d+", "0", s.lower()).split())

    parts = [norm(spec.instruction)] + [f"{norm(k)}={norm(v)}" for k, v in sorted(spec.files.items())]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def dedupe(specs: Iterable[TaskSpec], seen: set[str] | None = None) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """(kept, dropped): the first task of each fingerprint is kept; `seen` (updated) carries earlier pools."""
    seen = set() if seen is None else seen
    kept: list[TaskSpec] = []
    dropped: list[TaskSpec] = []
    for s in specs:
        fp = fingerprint(s)
        (dropped if fp in seen else kept).append(s)
        seen.add(fp)
    return kept, dropped


# --- agent-based validation: the learnable band --------------------------------------------------
def band_status(passed: int, attempts: int, band: tuple[float, float] = (0.0, 1.0)) -> TaskStatus:
    """K rollouts of the current policy: inside the open band (low, high) the task is learnable."""
    rate = passed / attempts if attempts else 0.0
    low, high = band
    if rate <= low:
        return TaskStatus.TOO_HARD
    if rate >= high:
        return TaskStatus.TOO_EASY
    return TaskStatus.LEARNABLE


def record_band(store: Any, task_id: str, passed: int, attempts: int,
                band: tuple[float, float] = (0.0, 1.0)) -> TaskStatus:
    """Store the agent-based verdict of a valid task: its band status and pass rate over K rollouts."""
    status = band_status(passed, attempts, band)
    store.add_validation(task_id, "agent", status == TaskStatus.LEARNABLE, None if status == TaskStatus.LEARNABLE
                         else str(status), {"passed": passed, "attempts": attempts, "band": list(band)})
    store.set_task_status(task_id, status, pass_rate=passed / attempts if attempts else 0.0)
    return status
