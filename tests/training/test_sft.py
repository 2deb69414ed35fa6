"""SFT: the loss falls on the assistant tokens only, the shared prompt runs once and the result is exact."""

from __future__ import annotations

import pytest
import torch

from appliance.config import TrainingSettings
from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample
from appliance.training.sft import (
    forward_chunks,
    plan_batches,
    sft,
    shared_prefix_length,
    shared_prefix_nll,
    successful_samples,
)
from appliance.training.trainer import PolicyTrainer

# system/user prompt, assistant turn, tool output, assistant turn
TOKENS = list(range(100, 130))
MASK = [0] * 10 + [1] * 6 + [0] * 8 + [1] * 6


def rollout(rid: str, outcome: Outcome) -> Rollout:
    return Rollout(rid, "run", "t", "g", 0, "builtin", 0, RolloutStatus.FINISHED, outcome=outcome, reward=1.0)


def sample(rid: str, tokens: list[int], mask: list[int]) -> Sample:
    return Sample(rid, None, 0, tokens, mask, [0.0] * len(tokens), 0)


def test_only_successful_rollouts_are_kept():
    rollouts = [rollout("a", Outcome.SUCCESS), rollout("b", Outcome.FAILURE), rollout("c", Outcome.INFRA_ERROR)]
    samples = [Sample(r.id, "g", 0, TOKENS, MASK, [0.0] * 30, 0) for r in rollouts]
    samples.append(Sample("a", "g", 1, TOKENS, [0] * 30, [0.0] * 30, 0))  # nothing sampled: nothing to learn
    assert [(s.rollout_id, s.branch) for s in successful_samples(rollouts, samples)] == [("a", 0)]


def test_the_shared_prefix_stops_before_the_first_predicting_position():
    prompt = list(range(100, 140))  # 40 shared tokens
    a = sample("a", prompt + [1, 2, 3, 4], [0] * 41 + [1] * 3)  # first trained token at 41: predicted from 40
    b = sample("b", prompt + [5, 6, 7], [0] * 42 + [1])
    assert shared_prefix_length([a, b], 2048) == 40
    early = sample("c", prompt + [8], [0] * 20 + [1] * 21)  # trains from 20: hidden state 19 is the last shared
    assert shared_prefix_length([a, early], 2048) == 19
    assert shared_prefix_length([a], 2048) == 0  # nothing to share
    assert shared_prefix_length([a, sample("d", [9] + prompt, [0] * 40 + [1])], 2048) == 0  # differ at token 0


def test_batches_cover_every_sample_each_epoch_and_group_similar_lengths():
    samples = [sample(f"s{i}", list(range(10 + (i * 37) % 50)), [1] * (10 + (i * 37) % 50)) for i in range(40)]
    batches = plan_batches(samples, 8, 2.0, seed=0)
    assert len(batches) == 10 and all(len(b) == 8 for b in batches)
    seen = [s.rollout_id for b in batches for s in b]
    assert sorted(seen) == sorted([s.rollout_id for s in samples] * 2)
    assert len(plan_batches(samples, 8, 1.5, seed=0)) == 8  # a fractional epoch ends part-way
    spread = max(max(len(s.token_ids) for s in b) - min(len(s.token_ids) for s in b) for b in batches)
    assert spread < 40  # sorted within pools: a batch does not span the whole range of lengths


def test_forward_chunks_stay_within_the_token_budget():
    batch = [sample(f"s{n}", [1] * n, [1] * n) for n in (10, 20, 30, 40)]
    chunks = forward_chunks(batch, 60, 2048)
    assert [[len(s.token_ids) for s in c] for c in chunks] == [[10, 20], [30], [40]]
    assert forward_chunks([sample("big", [1] * 500, [1] * 500)], 60, 2048)[0][0].rollout_id == "big"


def full_sequence_nll(model, samples: list[Sample]) -> torch.Tensor:
    """The reference: every sequence on its own through the model's own forward and loss."""
    total = torch.zeros(())
    for s in samples:
        ids = torch.tensor([s.token_ids])
        labels = torch.tensor([[t if m and j > 0 else -100 for j, (t, m) in enumerate(zip(s.token_ids, s.mask))]])
        n = int((labels[:, 1:] != -100).sum())
        total = total + model(input_ids=ids, labels=labels).loss * n
    return total


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
def test_the_shared_prefix_gives_the_full_sequences_loss_and_gradient(tiny_model, full):
    policy = PolicyTrainer(TrainingSettings(full_finetune=full, lora_targets=["q_proj", "v_proj", "down_proj"]),
                           tiny_model)
    if not full:  # B starts at zero: make the adapter change the prefix's keys and values
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.1)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, 2000, (24,), generator=g).tolist()
    samples = [sample(f"s{i}", prompt + torch.randint(10, 2000, (n,), generator=g).tolist(),
                      [0] * 26 + [1] * (n - 6) + [0] * 2 + [1] * 2)
               for i, n in enumerate((9, 14, 11))]
    assert shared_prefix_length(samples, 2048) == 24
    params = [p for p in policy.model.parameters() if p.requires_grad]
    policy.model.train()

    ours, n = shared_prefix_nll(policy.model, samples, max_len=2048, pad_id=policy.pad_id)
    assert n == sum(sum(s.mask[1:]) for s in samples)
    ours.backward()
    ours_grads = [p.grad.clone() for p in params]
    policy.model.zero_grad(set_to_none=True)
    reference = full_sequence_nll(policy.model, samples)
    reference.backward()
    assert torch.allclose(ours, reference, rtol=1e-5, atol=1e-4)
    for mine, theirs in zip(ours_grads, [p.grad for p in params], strict=True):  # float rounding only
        assert float((mine - theirs).norm()) <= 1e-5 * float(theirs.norm()) + 1e-6
    assert any(float(g.abs().sum()) > 0 for g in ours_grads)


@pytest.mark.slow
def test_sft_moves_the_lora_weights(tiny_model):
    policy = PolicyTrainer(TrainingSettings(sft_batch_size=2, sft_learning_rate=1e-2), tiny_model)
    before = policy.trainable_state()
    metrics = sft(policy, [Sample("a", "g", 0, TOKENS, MASK, [0.0] * 30, 0)] * 2)
    assert metrics["sft_steps"] == 1 and metrics["sft_tokens"] == 2 * 12 and metrics["sft_loss"] > 0
    after = policy.trainable_state()
    assert any(not torch.equal(before[n], after[n]) for n in before)
