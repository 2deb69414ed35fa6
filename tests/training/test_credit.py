"""Turn-level credit (issue 18): GAE over assistant turns against a hand computation, and the group's
prefix tree: a shared turn trained once, siblings' returns as the fork's baseline, no double counting."""

from __future__ import annotations

import pytest

from appliance.schemas import Sample
from appliance.training.credit import centred_per_rollout, runs, tree_credit, with_credit

# prompt (4 tokens), turn A (3), observation (2), turn B (2), observation (2), turn C (2)
CHAIN_IDS = [1, 2, 3, 4, 10, 11, 12, 5, 6, 20, 21, 7, 8, 30, 31]
CHAIN_MASK = [0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]


def sample(rollout: str, ids: list[int], mask: list[int], *, branch: int = 0, group: str = "g",
           advantage: float = 0.0) -> Sample:
    return Sample(rollout, group, branch, ids, mask, [0.0] * len(ids), 0, advantage=advantage)


def test_runs_are_the_trained_turns():
    assert runs(CHAIN_MASK) == [(4, 7), (9, 11), (13, 15)]
    assert runs([1, 1, 0, 1]) == [(1, 2), (3, 4)]  # token 0 is never trained


def test_gae_over_turns_matches_a_hand_computed_trajectory():
    gamma, lam, reward = 0.9, 0.8, 1.0
    v = {("r", 0, 4): 0.2, ("r", 0, 9): 0.5, ("r", 0, 13): 0.6}
    credit = tree_credit([sample("r", CHAIN_IDS, CHAIN_MASK)], v, {"r": reward}, gamma=gamma, lam=lam)
    # by hand: delta_t = gamma V(s_t+1) - V(s_t), the last one R - V(s_T); A_t = delta_t + gamma lam A_t+1
    d2 = 1.0 - 0.6                  # 0.4
    d1 = 0.9 * 0.6 - 0.5            # 0.04
    d0 = 0.9 * 0.5 - 0.2            # 0.25
    a2 = d2                         # 0.4
    a1 = d1 + 0.9 * 0.8 * a2        # 0.328
    a0 = d0 + 0.9 * 0.8 * a1        # 0.48616
    assert credit.advantage[("r", 0, 13)] == pytest.approx(a2)
    assert credit.advantage[("r", 0, 9)] == pytest.approx(a1)
    assert credit.advantage[("r", 0, 4)] == pytest.approx(a0)
    # the value targets are the lambda-returns A + V
    assert credit.ret[("r", 0, 4)] == pytest.approx(a0 + 0.2)
    assert [credit.depth[t] for t in v] == [0, 1, 2]
    # lambda = 1, gamma = 1: every turn's advantage is the outcome against its own state's value
    mc = tree_credit([sample("r", CHAIN_IDS, CHAIN_MASK)], v, {"r": reward}, gamma=1.0, lam=1.0)
    assert [mc.advantage[t] for t in v] == pytest.approx([0.8, 0.5, 0.4])


def two_branch_group() -> list[Sample]:
    """Two rollouts of one group that sampled the same first turn (the shared prefix), then forked:
    r1 solved the task (reward 1), r2 did not (0). Their first turn is one node of the tree."""
    shared_ids, shared_mask = [1, 2, 3, 4, 10, 11, 12, 5, 6], [0, 0, 0, 0, 1, 1, 1, 0, 0]
    return [
        sample("r1", shared_ids + [20, 21], shared_mask + [1, 1]),
        sample("r2", shared_ids + [40, 41, 42], shared_mask + [1, 1, 1]),
    ]


def test_a_two_branch_tree_trains_the_shared_turn_once_with_the_siblings_as_the_forks_baseline():
    group = two_branch_group()
    values = {("r1", 0, 4): 0.3, ("r2", 0, 4): 0.3, ("r1", 0, 9): 0.1, ("r2", 0, 9): 0.1}
    credit = tree_credit(group, values, {"r1": 1.0, "r2": 0.0}, gamma=1.0, lam=1.0)
    # the fork (after the shared turn): baseline = mean of the siblings' returns (1 + 0) / 2
    assert credit.advantage[("r1", 0, 9)] == pytest.approx(0.5)
    assert credit.advantage[("r2", 0, 9)] == pytest.approx(-0.5)
    # the shared turn: its return is the mean over the two rollouts below it, its baseline the critic's
    # value (a single sampled turn at its state), and it is trained in one sample only
    assert credit.ret[("r1", 0, 4)] == pytest.approx(0.5)
    assert credit.advantage[("r1", 0, 4)] == pytest.approx(0.5 - 0.3)
    assert credit.trained[("r1", 0, 4)] and not credit.trained[("r2", 0, 4)]

    trained = with_credit(group, credit, dedup=True)
    r1, r2 = trained
    assert runs(r1.mask) == [(4, 7), (9, 11)] and runs(r2.mask) == [(9, 12)]  # r2 keeps the shared turn as context
    assert r1.token_advantages[4:7] == pytest.approx([0.2] * 3)
    assert r1.token_advantages[9:11] == pytest.approx([0.5] * 2)
    assert r2.token_advantages[9:12] == pytest.approx([-0.5] * 3)
    # no double counting: the shared tokens carry one advantage, once, not one per rollout
    total = sum(a * m for s in trained for a, m in zip(s.token_advantages, s.mask, strict=True))
    assert total == pytest.approx(0.2 * 3 + 0.5 * 2 - 0.5 * 3)


def test_a_rollouts_branches_weigh_as_one_rollout_in_the_return():
    """A rollout whose history was rewritten (branch 1 forks inside branch 0's path) counts once at the
    turns its branches share, against a sibling rollout of the same group."""
    ids0, mask0 = [1, 2, 3, 4, 10, 11, 5, 6, 20, 21], [0, 0, 0, 0, 1, 1, 0, 0, 1, 1]
    ids1, mask1 = [1, 2, 3, 4, 10, 11, 5, 7, 30, 31], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]  # the rewrite after turn 1
    other = [1, 2, 3, 4, 50, 51, 52]
    group = [sample("a", ids0, mask0), sample("a", ids1, mask1, branch=1),
             sample("b", other, [0, 0, 0, 0, 1, 1, 1])]
    credit = tree_credit(group, {}, {"a": 1.0, "b": 0.0}, gamma=1.0, lam=1.0)
    # the first state is a fork of a's turn and b's: weighted by rollouts (1 each), not by branches (2 : 1)
    assert credit.advantage[("a", 0, 4)] == pytest.approx(0.5)
    assert credit.advantage[("b", 0, 4)] == pytest.approx(-0.5)
    assert credit.depth[("a", 1, 8)] == 1  # branch 1's own turn follows the turn it inherited


def test_grpo_turn_credit_only_redistributes_the_outcome_between_a_rollouts_turns():
    s = sample("r", CHAIN_IDS, CHAIN_MASK, advantage=0.75)
    v = {("r", 0, 4): 0.1, ("r", 0, 9): 0.7, ("r", 0, 13): 0.8}
    td = centred_per_rollout(tree_credit([s], v, {"r": 1.0}, lam=0.0, fork_baseline=False))
    [out] = with_credit([s], td, dedup=False, outcome_coef=1.0, turn_coef=0.5)
    per_turn = [out.token_advantages[a] for a, _ in runs(out.mask)]
    assert sum(per_turn) / 3 == pytest.approx(0.75)  # the group's advantage, on average
    assert per_turn[0] == max(per_turn)  # turn 0 moved V from 0.1 to 0.7: the step that did it stands out
