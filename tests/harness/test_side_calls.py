"""A harness's side calls (a title, a summary, a compaction on its small model: proxy.side_models) are their
own branches of the rollout's call tree, never trained, and never where a working turn merges (issue 48)."""

from __future__ import annotations

from appliance.schemas import ModelCall
from appliance.trajectories import build_samples, build_tree


def call(seq: int, prompt: list[int], completion: list[int], status: str = "ok") -> ModelCall:
    return ModelCall(None, "r", seq, status, {}, None, prompt, completion, [-0.5] * len(completion), 0, 0.1)


def test_side_calls_are_their_own_branches_and_train_nothing():
    calls = [
        call(0, [1, 2, 3], [10, 11]),                     # the first working turn
        call(1, [7, 8], [30, 31, 32], status="side"),     # a title call: its own conversation
        call(2, [1, 2, 3, 10, 11, 4], [12]),              # the next working turn continues the first
        call(3, [1, 2, 3, 10, 11, 4, 12, 5], [40], status="side"),  # a summary of the whole conversation
        call(4, [1, 2, 3, 10, 11, 4, 12, 5, 6], [13]),    # a working turn: merges with the working branch only
    ]
    tree = build_tree(calls)
    working = [b for b in tree.branches if not b.side]
    side = [b for b in tree.branches if b.side]
    assert len(working) == 1 and len(side) == 2
    assert working[0].token_ids == [1, 2, 3, 10, 11, 4, 12, 5, 6, 13]
    assert [b.token_ids for b in side] == [[7, 8, 30, 31, 32], [1, 2, 3, 10, 11, 4, 12, 5, 40]]
    assert side[1].parent == working[0].index and side[1].fork == 7  # it shares the conversation it summarized
    assert all(not any(b.mask) for b in side) and sum(side[0].sampled) == 3  # sampled, recorded, not trained
    assert tree.divergences == []  # a side branch rewrote no history
    samples, report = build_samples(calls, rollout_id="r", group_id=None)
    assert [s.branch for s in samples] == [working[0].index]
    assert sum(samples[0].mask) == 4  # the three working turns' four tokens only
    assert (report.calls, report.side_calls, report.skipped_calls, report.branches) == (3, 2, 0, 3)
