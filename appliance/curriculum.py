"""The loop's curriculum: the controller's decisions at DIAGNOSE, and the synthesis round they call for.

    control(...)          after an iteration (iteration 0 too): each family's frontier, mastered level and
                          the reason, from the last `loop.controller_window` reports (tasks.difficulty.decide)
    synthesize_round(...) the next SYNTHESIZE: per family, new tasks at the frontier, stretch tasks one
                          level up, and replays of learnable tasks from earlier rounds (tasks.difficulty)

A replayed task is stored again as a new row (`<run>.<spec id>.r<iteration>`) of the new iteration, already
valid (its spec passed validation before), so practice, banding and training treat it like any task of the
round, and the pool sees its latest verdict: it comes back until it is too easy.
"""

from __future__ import annotations

import inspect
import random
from typing import Any

from appliance.config import Settings
from appliance.schemas import CapabilityReport, Split, Task, TaskStatus
from appliance.seams import PolicyText
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.compose import compose_round
from appliance.tasks.difficulty import Decision, decide, replay_pool, size_round
from appliance.tasks.families import generate, seed_rng, synthesize

HINTED = "hint" in inspect.signature(synthesize).parameters  # the families' hint ladder (tool, partial)


def control(store: Store, run_id: str, iteration: int, families: list[str], report: CapabilityReport,
            settings: Settings) -> dict[str, Decision]:
    """Each family's move from the last `loop.controller_window` reports; `report` is this iteration's."""
    previous = store.report(run_id, iteration - 1) if iteration > 0 else None
    before = previous[0] if previous else CapabilityReport()
    levels = {f: int(before.levels.get(f, settings.loop.start_level)) for f in families}
    mastered = {f: int(before.mastered.get(f, 0)) for f in families}
    history = [store.report(run_id, i)
               for i in range(max(0, iteration - settings.loop.controller_window + 1), iteration)]
    reports = [h[0] for h in history if h] + [report]
    return decide(reports, levels, mastered, window=settings.loop.controller_window)


def synthesize_round(store: Store, settings: Settings, run_id: str, iteration: int, families: list[str],
                     generate_text: PolicyText | None = None) -> dict[str, Any]:
    """Store the round's tasks (proposed: new, stretch and self-proposed; valid: replays); returns what was made.

    Self-proposal (`loop.propose` tasks a round) asks the policy through `generate_text`, all at once; the
    proposals enter as `proposed` and VALIDATE decides, in isolation like any task code."""
    previous = store.report(run_id, iteration - 1)
    lp = settings.loop
    before = previous[0] if previous else CapabilityReport()
    levels = {f: int(before.levels.get(f, lp.start_level)) for f in families}
    tasks = store.tasks(run_id, split=Split.TRAIN)
    pool = replay_pool(tasks, levels)
    plan = size_round(families, levels, tasks_per_iteration=lp.tasks_per_iteration, per_family=lp.tasks_per_family,
                      stretch_share=lp.stretch_share, replay_share=lp.replay_share,
                      replay_available={f: len(v) for f, v in pool.items()})
    exclude = {t.spec["id"] for t in store.tasks(run_id)}  # held-out and earlier tasks
    made = {"new": 0, "stretch": 0, "replay": 0}
    decisions = before.decisions
    for p in plan:
        # Where the families have the hint ladder: stretch tasks carry a hint, the start of the command when
        # no unhinted request passes at the frontier yet, else the tool's name. A frontier stuck like that
        # above level 1 (which spells the command out) is also climbed by a rung: half its new tasks (rounded
        # down, so one stays bare) carry the start of the command, and their successes become
        # demonstrations of the bare request (appliance.hindsight).
        stuck = (decisions.get(p.family) or {}).get("passed", 1) == 0
        rung = ("partial" if stuck else "tool") if HINTED else None
        rounds = (("new", p.level, p.new, p.new // 2 if stuck and HINTED and p.level > 1 else 0),
                  ("stretch", p.level + 1, p.stretch, p.stretch if HINTED else 0))
        for kind, level, count, hinted in rounds:
            for spec in _draw(p.family, level, count, hinted, rung, seed=f"{run_id}:{iteration}:{kind}",
                              exclude=exclude):
                exclude.add(spec.id)
                spec.meta.update(iteration=iteration, round=kind)
                made[kind] += store.add_task(spec.task_row(run_id, Split.TRAIN, iteration=iteration))
        for old in pool.get(p.family, [])[: p.replay]:
            replay = dict(old.spec, meta={**(old.spec.get("meta") or {}), "iteration": iteration, "round": "replay",
                                          "replay_of": old.id})
            copy_id = f"{run_id}.{old.spec['id']}.r{iteration}"
            if store.add_task(TaskSpec.from_spec(replay).task_row(run_id, Split.TRAIN, iteration=iteration,
                                                                  task_id=copy_id)):
                store.add_validation(copy_id, "replay", True, None, {"replay_of": old.id})
                store.set_task_status(copy_id, TaskStatus.VALID)
                made["replay"] += 1
    if lp.compose:
        made["composed"] = _compose(store, run_id, iteration, tasks, levels, lp.compose, exclude)
    if lp.propose and generate_text is not None:
        from appliance.tasks.propose import propose_tasks

        specs = propose_tasks(generate_text, before, lp.propose, levels, max_tokens=lp.propose_max_tokens,
                              temperature=lp.propose_temperature, workers=lp.propose)
        made["proposal_requests"], made["proposal_parsed"], made["proposed"] = lp.propose, len(specs), 0
        for spec in specs:
            spec.meta.update(iteration=iteration, round="proposed")
            made["proposed"] += store.add_task(spec.task_row(run_id, Split.TRAIN, iteration=iteration))
        # what never became a task row (asked, parsed) is kept for the report's yield
        store.set_metrics(run_id, iteration, {"propose_asked": float(lp.propose),
                                              "propose_parsed": float(len(specs))})
    return {"levels": levels, "made": made, "plan": [vars(p) for p in plan]}


def _compose(store: Store, run_id: str, iteration: int, tasks: list[Task], levels: dict[str, int], n: int,
             exclude: set[str]) -> int:
    """`n` two-part requests (tasks.compose) from the run's valid training tasks at their family's frontier
    level (two frontier tasks in a row: harder than either); stored as proposed, so VALIDATE decides."""
    parts = [TaskSpec.of(t) for t in tasks
             if t.status == TaskStatus.VALID and t.family in levels and t.difficulty == levels[t.family]]
    made = 0
    for spec in compose_round(parts, n, random.Random(f"{run_id}:{iteration}:compose"), exclude):
        spec.meta.update(iteration=iteration, round="composed")
        made += store.add_task(spec.task_row(run_id, Split.TRAIN, iteration=iteration))
    return made


def _draw(family: str, level: int, count: int, hinted: int, hint: str | None, *, seed: str,
          exclude: set[str]) -> list[Any]:
    """`count` tasks of a seed, the last `hinted` of them drawn again at the hint rung (the same draw index
    gives the same task whatever the hint)."""
    specs = synthesize(family, level, count, seed=seed, exclude=exclude)
    for k in range(max(0, len(specs) - hinted), len(specs)):
        index = specs[k].meta["index"]
        specs[k] = generate(family, level, seed_rng("train", family, level, seed, index), split="train", hint=hint)
        specs[k].meta.update(split="train", seed=seed, index=index)
    return specs
