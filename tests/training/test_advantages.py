"""Group baselines: infra errors out of loss and baseline, small groups dropped, branches share an advantage."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample
from appliance.training.advantages import build_groups, group_advantages


def rollout(rid: str, group: str | None, reward: float | None, outcome: Outcome = Outcome.SUCCESS,
            status: RolloutStatus = RolloutStatus.FINISHED) -> Rollout:
    return Rollout(rid, "run", "task", group, 0, "builtin", 0, status, outcome=outcome, reward=reward)


def sample(rid: str, group: str | None, branch: int = 0) -> Sample:
    return Sample(rid, group, branch, [1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], 0)


def advantages_by_rollout(batch) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for s in batch.samples:
        out.setdefault(s.rollout_id, []).append(s.advantage)
    return out


def test_group_advantage_is_reward_minus_mean_over_std():
    adv = group_advantages([1.0, 0.0, 1.0, 0.0])
    std = math.sqrt(sum((r - 0.5) ** 2 for r in [1, 0, 1, 0]) / 3)
    assert adv == [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 2
    assert group_advantages([1.0, 0.0], scale=False) == [0.5, -0.5]
    assert group_advantages([0.3, 0.3, 0.3]) == [0.0, 0.0, 0.0]


def test_infra_errors_leave_loss_and_baseline():
    rollouts = [rollout("a", "g", 1.0), rollout("b", "g", 0.0),
                rollout("c", "g", 1.0, Outcome.INFRA_ERROR), rollout("d", "g", 1.0, Outcome.INFRA_ERROR)]
    batch = build_groups(rollouts, [sample(r.id, "g") for r in rollouts], min_valid_rollouts=2)
    adv = advantages_by_rollout(batch)
    assert set(adv) == {"a", "b"}  # the infra-error rollouts' samples are not trained on
    # baseline over the two valid rollouts only (mean 0.5); with the infra errors it would be 0.75
    assert adv["a"] == group_advantages([1.0, 0.0])[:1]
    assert adv["a"][0] == -adv["b"][0]
    assert batch.infra_errors == 2 and batch.infra_error_rate == 0.5
    assert batch.valid_groups == 1 and batch.dropped_groups == 0 and batch.valid_rollouts == 2
    assert batch.reward_mean == 0.5


def test_all_infra_error_group_is_dropped_and_counted():
    rollouts = [rollout(f"x{i}", "bad", 0.0, Outcome.INFRA_ERROR) for i in range(3)]
    rollouts += [rollout("a", "good", 1.0), rollout("b", "good", 0.0, Outcome.FAILURE)]
    batch = build_groups(rollouts, [sample(r.id, r.group_id) for r in rollouts], min_valid_rollouts=2)
    assert {s.rollout_id for s in batch.samples} == {"a", "b"}
    assert batch.dropped_groups == 1 and batch.valid_groups == 1
    assert batch.infra_errors == 3 and batch.rollouts == 5


def test_group_below_min_valid_rollouts_is_dropped():
    rollouts = [rollout("a", "g", 1.0), rollout("b", "g", 0.0), rollout("c", "g", 0.0, Outcome.INFRA_ERROR)]
    samples = [sample(r.id, "g") for r in rollouts]
    assert build_groups(rollouts, samples, min_valid_rollouts=3).dropped_groups == 1
    assert build_groups(rollouts, samples, min_valid_rollouts=3).samples == []
    assert build_groups(rollouts, samples, min_valid_rollouts=2).valid_groups == 1


def test_unfinished_or_unscored_rollouts_are_not_valid():
    rollouts = [rollout("a", "g", 1.0), rollout("b", "g", 0.0), rollout("c", "g", None),
                rollout("d", "g", None, outcome=None, status=RolloutStatus.RUNNING)]  # type: ignore[arg-type]
    batch = build_groups(rollouts, [sample(r.id, "g") for r in rollouts])
    assert set(advantages_by_rollout(batch)) == {"a", "b"}
    assert batch.infra_errors == 0


def test_branches_share_their_rollouts_advantage_and_count_once():
    rollouts = [rollout("a", "g", 1.0), rollout("b", "g", 0.0)]
    samples = [sample("a", "g", 0), sample("a", "g", 1), sample("a", "g", 2), sample("b", "g", 0)]
    batch = build_groups(rollouts, samples)
    adv = advantages_by_rollout(batch)
    assert len(adv["a"]) == 3 and len(set(adv["a"])) == 1
    # counted once each, the baseline is 0.5 and the advantages are symmetric; counted per sample it would be 0.75
    assert adv["a"][0] == -adv["b"][0] > 0
    assert batch.valid_rollouts == 2 and len(batch.samples) == 4


def test_rollout_without_group_has_no_baseline():
    batch = build_groups([rollout("a", None, 1.0)], [sample("a", None)], min_valid_rollouts=2)
    assert batch.dropped_groups == 1 and batch.samples == []


def test_zero_std_groups_are_kept_with_zero_advantage():
    batch = build_groups([rollout("a", "g", 1.0), rollout("b", "g", 1.0)], [sample("a", "g"), sample("b", "g")])
    assert [s.advantage for s in batch.samples] == [0.0, 0.0]
    assert batch.zero_std_groups == 1 and batch.valid_groups == 1


@given(st.lists(st.lists(st.sampled_from([0.0, 0.25, 1.0, None]), min_size=1, max_size=6), min_size=1, max_size=5),
       st.integers(1, 4), st.booleans())
def test_kept_groups_have_zero_mean_advantage(groups, min_valid, scale):
    rollouts, samples = [], []
    for g, rewards in enumerate(groups):
        for i, r in enumerate(rewards):
            outcome = Outcome.INFRA_ERROR if r is None else Outcome.SUCCESS
            rollouts.append(rollout(f"{g}-{i}", f"g{g}", 0.0 if r is None else r, outcome))
            samples.append(sample(f"{g}-{i}", f"g{g}"))
    batch = build_groups(rollouts, samples, min_valid_rollouts=min_valid, scale_rewards=scale)
    valid_counts = [sum(r is not None for r in rewards) for rewards in groups]
    assert batch.valid_groups == sum(c >= min_valid for c in valid_counts)
    assert batch.valid_groups + batch.dropped_groups == len(groups)
    for g in range(len(groups)):
        adv = [s.advantage for s in batch.samples if s.group_id == f"g{g}"]
        assert abs(sum(adv)) < 1e-6
