"""SFT through TRL's SFTTrainer: the loss falls on engine-sampled (assistant) tokens only."""

from __future__ import annotations

import pytest
import torch

from appliance.config import TrainingSettings
from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample
from appliance.training.sft import build_sft_trainer, sft, successful_samples
from appliance.training.trainer import PolicyTrainer

# system/user prompt, assistant turn, tool output, assistant turn
TOKENS = list(range(100, 130))
MASK = [0] * 10 + [1] * 6 + [0] * 8 + [1] * 6


def rollout(rid: str, outcome: Outcome) -> Rollout:
    return Rollout(rid, "run", "t", "g", 0, "builtin", 0, RolloutStatus.FINISHED, outcome=outcome, reward=1.0)


def test_only_successful_rollouts_are_kept():
    rollouts = [rollout("a", Outcome.SUCCESS), rollout("b", Outcome.FAILURE), rollout("c", Outcome.INFRA_ERROR)]
    samples = [Sample(r.id, "g", 0, TOKENS, MASK, [0.0] * 30, 1.0, 0) for r in rollouts]
    samples.append(Sample("a", "g", 1, TOKENS, [0] * 30, [0.0] * 30, 1.0, 0))  # nothing sampled: nothing to learn
    assert [(s.rollout_id, s.branch) for s in successful_samples(rollouts, samples)] == [("a", 0)]


@pytest.mark.slow
def test_sft_labels_are_the_assistant_tokens_only(tiny_model, tmp_path):
    policy = PolicyTrainer(TrainingSettings(micro_batch_size=2), tiny_model)
    samples = [Sample("a", "g", 0, TOKENS, MASK, [0.0] * 30, 1.0, 0),
               Sample("b", "g", 0, TOKENS[:20], MASK[:20], [0.0] * 20, 1.0, 0)]
    trainer = build_sft_trainer(policy, samples, tmp_path)
    labels = trainer.train_dataset[0]["labels"]
    assert labels == [t if m else -100 for t, m in zip(TOKENS, MASK, strict=True)]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    trained = batch["labels"] != -100
    assert trained[0].tolist() == [bool(m) for m in MASK]
    assert trained[1].tolist() == [bool(m) for m in MASK[:20]] + [False] * 10  # padding is never trained
    assert torch.equal(batch["input_ids"][0][trained[0]], torch.tensor([t for t, m in zip(TOKENS, MASK) if m]))


@pytest.mark.slow
def test_sft_moves_the_lora_weights(tiny_model):
    policy = PolicyTrainer(TrainingSettings(micro_batch_size=2, sft_learning_rate=1e-2), tiny_model)
    before = policy.trainable_state()
    metrics = sft(policy, [Sample("a", "g", 0, TOKENS, MASK, [0.0] * 30, 1.0, 0)] * 2)
    assert metrics["sft_steps"] == 1 and metrics["sft_tokens"] == 2 * 12 and metrics["sft_loss"] > 0
    after = policy.trainable_state()
    assert any(not torch.equal(before[n], after[n]) for n in before)
