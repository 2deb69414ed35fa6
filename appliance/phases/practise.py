"""PRACTISE: the policy's rollouts on the iteration's tasks, group_size each, and more for groups without signal.

Rollout ids are derived from (task, iteration, draw index), so a crash resumes the same draws: a rollout
left `running` is requeued (its calls forgotten), a pending one is run, a finished one is kept.

Under `loop.deadline` the groups run a few at a time, and no new group starts once only a LEARN's time is
left before the deadline, so the iteration still trains on what was practised.
"""

from __future__ import annotations

import datetime as dt
import time

from appliance.config import Settings
from appliance.phases.context import PhaseContext
from appliance.practice import new_rollout, run_rollouts
from appliance.schemas import Outcome, RolloutStatus, Task, TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.pool import record_band

Work = list[tuple[TaskSpec, str]]  # (task, rollout id)
# what an iteration needs before its LEARN under a deadline: synthesize and validate (~1 min on the cpu
# profile after the warm-start's) and a few groups of practice
ITERATION_LEAD_S = 300.0


def run_pending(ctx: PhaseContext, work: Work) -> None:
    """Run the rollouts named in `work` that are not finished; requeue those a crash interrupted."""
    todo = []
    for spec, rollout_id in work:
        r = ctx.store.get_rollout(rollout_id)
        if r.status == RolloutStatus.RUNNING:
            ctx.store.requeue_rollout(rollout_id)
            r = ctx.store.get_rollout(rollout_id)
        if r.status == RolloutStatus.PENDING:
            todo.append((spec, r))
    ctx.progress.add(total=len(work), done=len(work) - len(todo))
    # each rollout passes the loop's safe point as it starts: a pause holds the rest back, a stop starts none
    run_rollouts(ctx.practice, todo, slot=ctx.rollout_slot)


def practise(ctx: PhaseContext, index: int) -> None:
    lp = ctx.settings.loop
    if warmstart_first(ctx, index):
        ctx.event("practise", f"iteration {index}: no practice: the warm-start SFT comes first (loop.warmstart_first)")
        return
    tasks = ctx.iteration_tasks(index, TaskStatus.VALID) + [
        t for t in ctx.iteration_tasks(index)
        if t.status in (TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD)]
    ends_at = practice_ends_at(ctx.settings, ctx.store, ctx.run_id)
    started = 0
    # under a deadline, runs of whole groups of about 4 sandbox-pools' worth, so the clock is read often
    chunk_rollouts = None if ends_at is None else 4 * ctx.settings.sandbox.max_concurrent
    for chunk in group_chunks(tasks, lp.group_size, chunk_rollouts):
        if past(ends_at):
            ctx.event("practise", f"iteration {index}: {started} of {len(tasks)} tasks practised: the rest would "
                                  "leave LEARN too little time before loop.deadline", practised=started)
            break
        run_pending(ctx, [draw(ctx, task, index, k) for task in chunk for k in range(lp.group_size)])
        started += len(chunk)
    draw_more(ctx, index, tasks[:started], ends_at)
    for task in ctx.iteration_tasks(index, TaskStatus.VALID):
        rs = [r for r in ctx.store.rollouts(ctx.run_id, group_id=f"{task.id}.g{index}")
              if r.outcome != Outcome.INFRA_ERROR]
        if rs:  # every rollout an infra error: no verdict; the task stays valid for a later round
            record_band(ctx.store, task.id, sum(r.outcome == Outcome.SUCCESS for r in rs), len(rs), lp.band)
    rollouts = ctx.store.rollouts(ctx.run_id, iteration=index, purpose="train")
    wins = sum(r.outcome == Outcome.SUCCESS for r in rollouts)
    infra = sum(r.outcome == Outcome.INFRA_ERROR for r in rollouts)
    ctx.event("practise", f"iteration {index}: {len(rollouts)} rollouts, {wins} successes, {infra} infra errors")


def draw(ctx: PhaseContext, task: Task, index: int, k: int) -> tuple[TaskSpec, str]:
    """The k-th rollout of a task's group this iteration (made once: a second call finds it)."""
    group = f"{task.id}.g{index}"
    r = new_rollout(ctx.store, harness=ctx.settings.loop.harness, policy_version=ctx.engine.policy_version,
                    run_id=ctx.run_id, task_id=task.id, group_id=group, iteration=index, purpose="train",
                    rollout_id=f"{group}.{k}")
    return TaskSpec.of(task), r.id


def warmstart_first(ctx: PhaseContext, index: int) -> bool:
    cfg = ctx.settings.training
    if not (ctx.settings.loop.warmstart_first and cfg.demonstrations and index == 1):
        return False
    if ctx.store.rollouts(ctx.run_id, iteration=index, purpose="train"):
        return False  # practised before (a run that started with the setting off): finish that
    return not ctx.store.checkpoints(ctx.run_id) and bool(
        ctx.store.demonstrations(ctx.run_id, levels=cfg.demo_warmstart_levels))


def draw_more(ctx: PhaseContext, index: int, tasks: list[Task], ends_at: float | None = None) -> None:
    """Dynamic sampling (DAPO), bounded: a group whose valid rollouts all scored the same has advantage 0
    and teaches nothing, so it gets more rollouts, group_size at a time, up to `loop.extra_draws` extra,
    until its rewards differ. Ids continue the group's numbering, so a restart resumes the same draws.
    No round starts after `ends_at` (wall-clock seconds)."""
    lp, drawn = ctx.settings.loop, 0
    for _ in range(-(-lp.extra_draws // lp.group_size) + 1):  # the bound's rounds, plus one to finish a crash's
        if past(ends_at):
            break
        work: Work = []
        for task in tasks:
            rs = ctx.store.rollouts(ctx.run_id, group_id=f"{task.id}.g{index}")
            unfinished = [r for r in rs if r.status != RolloutStatus.FINISHED]
            if unfinished:  # drawn before a crash: run those first
                work += [(TaskSpec.of(task), r.id) for r in unfinished]
                continue
            rewards = [float(r.reward or 0.0) for r in rs if r.outcome != Outcome.INFRA_ERROR]
            more = extra_draws_for(rewards, lp.group_size, lp.extra_draws, len(rs))
            work += [draw(ctx, task, index, k) for k in range(len(rs), len(rs) + more)]
        if not work:
            break
        drawn += len(work)
        run_pending(ctx, work)
    if drawn:
        ctx.event("practise", f"iteration {index}: {drawn} extra rollouts for groups without signal", extra=drawn)


def extra_draws_for(rewards: list[float], group_size: int, max_extra: int, drawn: int | None = None) -> int:
    """How many more rollouts a group gets now: none once its (valid) rewards differ, none without any valid
    reward (the machine failed; more draws would fail too), otherwise up to group_size more while fewer than
    `max_extra` extra have been drawn (`drawn`: rollouts so far, infra errors included)."""
    drawn = len(rewards) if drawn is None else drawn
    if not rewards or len(set(rewards)) > 1:
        return 0
    return max(0, min(group_size, group_size + max_extra - drawn))


def group_chunks(tasks: list[Task], group_size: int, rollouts: int | None) -> list[list[Task]]:
    """The tasks in runs of whole groups of about `rollouts` rollouts (None: all in one)."""
    per = max(1, len(tasks) if rollouts is None else -(-rollouts // group_size))
    return [tasks[i:i + per] for i in range(0, len(tasks), per)]


def learn_reserve_s(settings: Settings, store: Store, run_id: str) -> float:
    """A LEARN phase's expected time: the run's last one's (the loop records each phase's duration), else
    `loop.train_reserve_s`."""
    took = [e.duration_s for e in store.events(run_id, kind="info", limit=100_000)
            if e.data.get("phase") == "train" and e.duration_s]
    return took[-1] if took else settings.loop.train_reserve_s


def practice_ends_at(settings: Settings, store: Store, run_id: str) -> float | None:
    """When a PRACTISE starts no more rollouts (wall-clock seconds): `loop.deadline` less a LEARN's time."""
    if settings.loop.deadline is None:
        return None
    return settings.loop.deadline.timestamp() - learn_reserve_s(settings, store, run_id)


def past(ends_at: float | None) -> bool:
    """Whether the wall clock has reached `ends_at` (never, for None)."""
    return ends_at is not None and time.time() >= ends_at


def no_time_to_train(settings: Settings, store: Store, run_id: str) -> bool:
    """Past `loop.deadline`, less a LEARN's time and a few minutes to synthesize, validate and practise: the
    loop starts no other iteration."""
    ends_at = practice_ends_at(settings, store, run_id)
    return ends_at is not None and time.time() + ITERATION_LEAD_S >= ends_at


def in_training_window(window: str | None) -> bool:
    """Whether now is inside `loop.training_window` ("HH:MM-HH:MM", across midnight too; None: always)."""
    if not window:
        return True
    start, end = (dt.time.fromisoformat(t.strip()) for t in window.split("-"))
    now = dt.datetime.now().time()
    return start <= now < end if start <= end else now >= start or now < end
