"""Group-relative advantages from rollout rewards: the GRPO baseline, with the appliance's outcome rules.

Pure functions over schemas records (no torch), so the rules the DESIGN page states are tested directly:

- the unit of the baseline is the *rollout*, not the sample: a rollout whose harness rewrote its history
  yields several samples (branches), and all of them carry that rollout's advantage without counting twice;
- `infra_error` rollouts (and rollouts that never finished) are the machine's doing: they are left out of the
  baseline and of the loss, but counted, since the infra-error rate is a first-class metric;
- a group with fewer than `min_valid_rollouts` valid rollouts has no trustworthy baseline and is dropped.

The advantage is TRL's: reward minus the group mean, divided by the group's sample std (+1e-4) when
`scale_rewards` (Dr. GRPO turns the division off). A group whose rewards are all equal gets advantage 0
and teaches the policy nothing: it counts as a valid (zero-std) group, and its samples are kept only when
asked (`keep_zero_std`, for the KL term when beta > 0). Without beta, a step over such samples would still
move the weights on AdamW's momentum alone and publish a new policy version for nothing (DAPO's dynamic
sampling filters them out for the same reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample

STD_EPS = 1e-4  # TRL's epsilon in (r - mean) / (std + eps)


@dataclass(slots=True)
class GroupedBatch:
    """The trainable samples of one step (advantage set) and what was left out, for the metrics."""

    samples: list[Sample]
    valid_groups: int
    dropped_groups: int
    zero_std_groups: int
    rollouts: int  # every rollout considered, infra errors included
    valid_rollouts: int  # rollouts in kept groups
    infra_errors: int
    rewards: dict[str, float] = field(default_factory=dict)  # rollout id -> reward: the valid rollouts in kept groups
    signal_groups: int = 0  # kept groups whose rewards differ: the ones with a non-zero advantage
    turns: dict[str, int] = field(default_factory=dict)  # model calls of each valid rollout (a metric)

    @property
    def infra_error_rate(self) -> float:
        return self.infra_errors / self.rollouts if self.rollouts else 0.0

    @property
    def reward_mean(self) -> float:
        return sum(self.rewards.values()) / len(self.rewards) if self.rewards else 0.0

    @property
    def reward_std(self) -> float:
        return _std(list(self.rewards.values())) if len(self.rewards) > 1 else 0.0


def is_valid(rollout: Rollout) -> bool:
    """Trained on and part of the baseline: finished, scored, and not the machine's fault."""
    return (
        rollout.status == RolloutStatus.FINISHED
        and rollout.outcome is not None
        and rollout.outcome != Outcome.INFRA_ERROR
        and rollout.reward is not None
    )


def group_advantages(rewards: list[float], *, scale: bool = True) -> list[float]:
    """One group's advantages, in the order of `rewards` (one entry per valid rollout)."""
    if len(set(rewards)) == 1:
        return [0.0] * len(rewards)  # exact zero, not a float rounding residue of the mean
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if not scale:
        return centred
    std = _std(rewards) if len(rewards) > 1 else 0.0
    return [c / (std + STD_EPS) for c in centred]


def build_groups(rollouts: list[Rollout], samples: list[Sample], *, min_valid_rollouts: int = 2,
                 scale_rewards: bool = True, keep_zero_std: bool = True) -> GroupedBatch:
    """Assign every sample of a valid rollout in a kept group its rollout's advantage.

    A rollout without a group id is its own group (it has no baseline and is dropped unless
    `min_valid_rollouts` is 1). `keep_zero_std=False` leaves out the samples of groups whose rewards are
    all equal (they are still counted in valid_groups and zero_std_groups). Samples whose rollout is not in
    `rollouts` are ignored: without the rollout there is no outcome to trust.
    """
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id or f"rollout:{r.id}", []).append(r)
    by_rollout: dict[str, list[Sample]] = {}
    for s in samples:
        by_rollout.setdefault(s.rollout_id, []).append(s)

    out = GroupedBatch([], 0, 0, 0, len(rollouts), 0, sum(r.outcome == Outcome.INFRA_ERROR for r in rollouts))
    for members in groups.values():
        valid = [r for r in members if is_valid(r)]
        if len(valid) < min_valid_rollouts:
            out.dropped_groups += 1
            continue
        rewards = [float(r.reward) for r in valid]  # type: ignore[arg-type]
        advantages = group_advantages(rewards, scale=scale_rewards)
        out.valid_groups += 1
        out.valid_rollouts += len(valid)
        zero_std = len(set(rewards)) == 1
        out.zero_std_groups += zero_std
        out.signal_groups += not zero_std
        out.rewards.update({r.id: reward for r, reward in zip(valid, rewards, strict=True)})
        out.turns.update({r.id: r.turns for r in valid})
        if zero_std and not keep_zero_std:
            continue
        for rollout, adv in zip(valid, advantages, strict=True):
            for s in sorted(by_rollout.get(rollout.id, []), key=lambda s: s.branch):
                out.samples.append(replace(s, advantage=adv))
    return out


def _std(values: list[float]) -> float:
    # Bessel-corrected, as TRL's nanstd: with G=2..16 rollouts the population std would shrink advantages.
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
