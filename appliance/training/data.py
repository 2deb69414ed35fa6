"""What a LEARN phase trains on: the finished practice rollouts of the serving policy, and their samples.

Only rollouts sampled by the policy version the engine serves are taken (on-policy up to the engine /
trainer numerical gap the importance ratio corrects); older ones were the data of an earlier phase. Their
samples are the ones PRACTISE stored (built by `appliance.trajectories` from the recorded model calls); a
rollout whose samples are missing is rebuilt from its calls here, so a crash between the two loses nothing.
"""

from __future__ import annotations

from appliance.errors import ApplianceError
from appliance.schemas import Rollout, RolloutStatus, Sample
from appliance.store import Store
from appliance.trajectories import build_samples
from appliance.training.advantages import is_valid


def training_data(store: Store, run_id: str | None, *, policy_version: int, iteration: int | None = None,
                  purpose: str = "train") -> tuple[list[Rollout], list[Sample]]:
    rollouts = [r for r in store.rollouts(run_id, iteration=iteration, purpose=purpose, status=RolloutStatus.FINISHED)
                if r.policy_version == policy_version]
    return rollouts, samples_of(store, rollouts)


def samples_of(store: Store, rollouts: list[Rollout]) -> list[Sample]:
    """The stored samples of `rollouts`; a valid rollout without any is rebuilt from its model calls (and
    the rebuild stored), so rollouts finished before samples were written in the same transaction, or by
    an older version, still train."""
    samples: list[Sample] = []
    for r in rollouts:
        found = store.samples(r.id)
        if not found and is_valid(r):
            calls = store.model_calls(r.id)
            if calls:
                found, _ = build_samples(calls, rollout_id=r.id, group_id=r.group_id)
                store.add_samples(found)
        samples += found
    return samples


def train_on_practice(store: Store, settings, engine, *, run_id: str | None, steps: int = 1,
                      iteration: int | None = None):
    """`appliance train`: one LEARN phase over the serving policy's practised rollouts."""
    from appliance.training.learn import learn

    rollouts, samples = training_data(store, run_id, policy_version=engine.policy_version, iteration=iteration)
    if not rollouts:
        raise ApplianceError(
            f"no finished practice rollouts of policy version {engine.policy_version} in run {run_id!r}",
            "practise first (the loop's PRACTISE phase stores rollouts with their samples), then train",
        )
    return learn(store, settings, engine, rollouts, samples, run_id=run_id, iteration=iteration, steps=steps)
