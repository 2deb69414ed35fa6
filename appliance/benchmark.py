"""`appliance eval`: a set of the user's tasks measured at a policy version (`--version N`, `--base`) or at
the one the engine serves.

The rollouts go through the loop's own evaluation path: `practice.run_rollouts` (engine, proxy, sandboxes,
harness, the verdict), purpose "eval" (the built-in agent samples at `evaluation.temperature`, as the
loop's evaluation does), and pass@1 with its 95 % Wilson interval is `evaluate.pass_at_1` over (family,
level) cells, the one definition the held-out curve uses; infra errors count in neither n nor passed and
are reported apart (`evaluate.summarize_set`, which the loop's evaluation of `evaluation.extra_sets` uses
too). The rollouts are stored without a run (group = the evaluation's id) and the summary in `eval_sets`, so
nothing the loop practises or trains on ever holds them. `--version N` serves a stored policy version for the
evaluation alone (`serving.Engine`'s `version`): the store still says the loop's version is served.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from appliance.evaluate import summarize_set
from appliance.practice import Practice, new_rollout, run_rollouts
from appliance.schemas import Rollout
from appliance.store import Store
from appliance.tasks.format import TaskSpec

Run = Callable[[list[tuple[TaskSpec, Rollout]]], None]


def new_eval_id() -> str:
    return f"eval-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def practice_runner(practice: Practice, on_rollout: Callable[[Rollout], None]) -> Run:
    """Rollouts run concurrently by practice; `on_rollout` hears each one as it ends."""
    @contextmanager
    def slot(rollout_id: str) -> Iterator[None]:
        try:
            yield
        finally:
            on_rollout(practice.store.get_rollout(rollout_id))

    def run(work: list[tuple[TaskSpec, Rollout]]) -> None:
        run_rollouts(practice, work, slot=slot)
    return run


def evaluate_set(store: Store, specs: list[TaskSpec], *, policy_version: int, k: int, harness: str, run: Run,
                 eval_id: str | None = None) -> dict[str, Any]:
    """k rollouts of every task at `policy_version`; the summary (also what `eval_sets` stores)."""
    eval_id = eval_id or new_eval_id()
    work = []
    for spec in specs:
        for j in range(k):
            r = new_rollout(store, harness=harness, policy_version=policy_version, task_id=spec.id, group_id=eval_id,
                            purpose="eval", rollout_id=f"{eval_id}.{spec.id}.{j}")
            work.append((spec, r))
    run(work)
    return summarize_set(store, eval_id, specs, k)


def describe(summary: dict[str, Any]) -> str:
    return (f"pass@1 {summary['pass_at_1']:.1%} [{summary['low']:.1%}, {summary['high']:.1%}] "
            f"({summary['passed']}/{summary['n']}) over {summary['tasks']} tasks x {summary['k']}"
            + (f"; {summary['infra_errors']} infra error(s) left out" if summary["infra_errors"] else ""))
