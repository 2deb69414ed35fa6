"""Task sets the user brings: folders of task directories in any format the appliance reads.

A PATH is one task (the appliance's own directory or .toml file, a Harbor directory, a Terminal-Bench 1
directory) or a folder of them. `load_sets` reads every task, builds each foreign task's environment
(`tasks.environment`) and returns the appliance's specs with every exclusion and its reason: a task that
cannot be honoured is excluded, never half-run. `validate_sets` adds the oracle: the reference solution
must pass the tests and the untouched workspace must fail them (`validate_many`, the same checks as every
task's), and reports how many passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError, TaskFormatError
from appliance.tasks.environment import build_environment
from appliance.tasks.format import TASK_FILE, TaskSpec, load_task
from appliance.tasks.harbor import is_foreign, read_foreign, to_spec


@dataclass(slots=True)
class Excluded:
    path: str
    reason: str


@dataclass(slots=True)
class TaskSet:
    specs: list[TaskSpec] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)  # spec id -> its directory
    excluded: list[Excluded] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"tasks": [{"id": s.id, "path": self.paths.get(s.id), "format": s.meta.get("format", "appliance"),
                           "notes": s.meta.get("notes", [])} for s in self.specs],
                "excluded": [{"path": e.path, "reason": e.reason} for e in self.excluded]}


def _is_task(p: Path) -> bool:
    return is_foreign(p) or (p.is_dir() and (p / TASK_FILE).is_file()) or (p.is_file() and p.suffix == ".toml")


def task_paths(paths: Sequence[Path]) -> list[Path]:
    """Each PATH if it is a task, else the tasks directly inside it, in name order."""
    out: list[Path] = []
    for p in paths:
        if not p.exists():
            raise ApplianceError(f"{p} does not exist", "pass task directories or folders of them")
        if _is_task(p):
            out.append(p)
            continue
        found = sorted(c for c in p.iterdir() if _is_task(c)) if p.is_dir() else []
        if not found:
            raise ApplianceError(f"{p} holds no task (no task.toml, instruction.md or task.yaml)",
                                 "pass a task directory or a folder of task directories (docs/TASKS.md)")
        out.extend(found)
    return out


def load_sets(settings: Settings, paths: Sequence[Path], log: Callable[[str], None] = print) -> TaskSet:
    result = TaskSet()
    for p in task_paths(paths):
        try:
            if is_foreign(p):
                task = read_foreign(p)
                env = build_environment(settings, task, log)
                spec = to_spec(task, env.image, env.workdir, env.notes)
            else:
                spec = load_task(p)
        except TaskFormatError as e:
            result.excluded.append(Excluded(str(p), e.message))
            continue
        if spec.id in result.paths:
            result.excluded.append(Excluded(str(p), f"task id {spec.id!r} is also {result.paths[spec.id]}"))
            continue
        result.specs.append(spec)
        result.paths[spec.id] = str(p)
    return result


def validate_sets(settings: Settings, paths: Sequence[Path], *, parallel: int = 2,
                  log: Callable[[str], None] = print) -> tuple[TaskSet, dict[str, Any]]:
    """Load and validate by oracle; the set keeps the valid specs, every other task is an exclusion."""
    from appliance.tasks.validate import validate_many

    loaded = load_sets(settings, paths, log)
    verdicts = validate_many(settings, loaded.specs, parallel=parallel) if loaded.specs else []
    valid = TaskSet(excluded=list(loaded.excluded))
    stages: dict[str, Any] = {}
    for spec, v in zip(loaded.specs, verdicts, strict=True):
        stages[spec.id] = v.as_dict()
        if v.ok:
            valid.specs.append(spec)
            valid.paths[spec.id] = loaded.paths[spec.id]
        else:
            valid.excluded.append(Excluded(loaded.paths[spec.id], v.reason or "rejected"))
    return valid, stages
