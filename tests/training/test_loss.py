"""The GRPO-family loss: TRL's aggregation per loss type, the engine importance ratio, the token mask."""

from __future__ import annotations

import math

import pytest
import torch

from appliance.config import TrainingSettings
from appliance.training.loss import Normaliser, engine_is_ratio, pack, policy_loss

MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0, 0.0]])
ADV = torch.tensor([1.0, -0.5])


def logps_like(mask: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)
    return (-torch.rand(mask.shape) * 3).requires_grad_(True)


def test_pack_shifts_mask_and_logprobs_onto_targets():
    b = pack([[5, 6, 7, 8], [9, 10]], [[0, 1, 0, 1], [0, 1]], [[0.0, -0.1, 0.0, -0.3], [0.0, -0.2]], [1.0, -1.0],
             pad_id=0, max_len=16)
    assert b.input_ids.tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert b.mask.tolist() == [[1, 0, 1], [1, 0, 0]]  # position t holds token t+1
    assert torch.allclose(b.engine_logps, torch.tensor([[-0.1, 0.0, -0.3], [-0.2, 0.0, 0.0]]))
    assert b.trained_tokens == 3
    assert pack([[1, 2, 3, 4]], [[0, 1, 1, 1]], [[0.0] * 4], [0.0], pad_id=0, max_len=3).mask.tolist() == [[1, 1]]


def test_a_batch_divides_by_its_rows_temperatures_or_by_one():
    plain = pack([[5, 6]], [[0, 1]], [[0.0, -0.1]], [1.0], pad_id=0, max_len=16)
    assert plain.temperatures is None and plain.temperature == 1.0
    hot = pack([[5, 6]], [[0, 1]], [[0.0, -0.1]], [1.0], pad_id=0, max_len=16, temperatures=[0.7])
    assert isinstance(hot.temperature, torch.Tensor) and hot.temperature.tolist() == pytest.approx([0.7])


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "gspo"])
def test_on_policy_loss_matches_trl_aggregation_and_only_masked_tokens_get_gradient(loss_type):
    cfg = TrainingSettings(loss_type=loss_type)
    logps = logps_like(MASK)
    norm = Normaliser(sequences=2, tokens=int(MASK.sum()), max_len=8)
    loss, _ = policy_loss(logps, logps.detach(), None, None, MASK, ADV, cfg, norm)
    # on-policy the ratio is 1: the per-token loss is -A
    per_token = -ADV.unsqueeze(1) * MASK
    expected = {
        "grpo": (per_token.sum(1) / MASK.sum(1)).mean(),
        "gspo": (per_token.sum(1) / MASK.sum(1)).mean(),
        "dapo": per_token.sum() / MASK.sum(),
        "dr_grpo": per_token.sum() / (2 * 8),
    }[loss_type]
    assert float(loss.detach()) == pytest.approx(float(expected))
    loss.backward()
    assert torch.all(logps.grad[MASK == 0] == 0)
    assert torch.all(logps.grad[MASK == 1] != 0)


def test_micro_batches_sum_to_the_whole_step_loss():
    cfg = TrainingSettings(loss_type="dapo")
    logps = logps_like(MASK).detach()
    old = logps - 0.05
    norm = Normaliser(sequences=2, tokens=int(MASK.sum()), max_len=8)
    whole, _ = policy_loss(logps, old, None, None, MASK, ADV, cfg, norm)
    parts = sum(float(policy_loss(logps[i:i + 1], old[i:i + 1], None, None, MASK[i:i + 1], ADV[i:i + 1], cfg, norm)[0])
                for i in range(2))
    assert parts == pytest.approx(float(whole))


def test_ppo_clip_bounds_the_ratio():
    cfg = TrainingSettings(loss_type="dapo", epsilon=0.2)
    old = torch.zeros(1, 2)
    logps = torch.tensor([[math.log(2.0), math.log(0.5)]])  # ratios 2 and 0.5
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(logps, old, None, None, mask, torch.tensor([1.0]), cfg, Normaliser(1, 2, 2))
    # A > 0: min(2*A, 1.2*A) = 1.2 and min(0.5, 0.8) = 0.5
    assert float(loss) == pytest.approx(-(1.2 + 0.5) / 2)
    assert stats["clip_ratio"] == pytest.approx(0.5)


def test_kl_term_is_zero_against_itself_and_positive_otherwise():
    cfg = TrainingSettings(loss_type="dapo", beta=0.1)
    logps = logps_like(MASK).detach()
    norm = Normaliser(2, int(MASK.sum()), 8)
    _, same = policy_loss(logps, logps, logps, None, MASK, ADV, cfg, norm)
    _, other = policy_loss(logps, logps, logps - 0.3, None, MASK, ADV, cfg, norm)
    assert same["kl"] == pytest.approx(0.0) and other["kl"] > 0


def test_engine_ratio_truncates_at_the_cap():
    cfg = TrainingSettings(is_mode="token_truncate", is_cap=2.0)
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    engine = torch.tensor([[-1.0, -3.0, -0.5]])  # ratios 1, e^2, e^-0.5
    ratio, stats = engine_is_ratio(old, engine, torch.ones(1, 3), cfg)
    assert ratio[0].tolist() == pytest.approx([1.0, 2.0, math.exp(-0.5)])
    assert stats["clipped"].tolist() == [[False, True, False]]


def test_engine_ratio_masks_tokens_and_sequences_outside_the_band():
    old = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    engine = torch.tensor([[-1.0, -3.0, -1.0], [-1.1, -0.9, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    token, _ = engine_is_ratio(old, engine, mask, TrainingSettings(is_mode="token_mask", is_cap=2.0, is_min=0.5))
    assert token[0].tolist() == pytest.approx([1.0, 0.0, 1.0])  # e^2 is out of band: that token is dropped
    seq, stats = engine_is_ratio(old, engine, mask, TrainingSettings(is_mode="sequence_mask", is_cap=2.0))
    assert seq.shape == (2, 1)
    assert seq[:, 0].tolist() == pytest.approx([0.0, 1.0])  # sequence 0's summed log-ratio is 2: dropped
    assert stats["clipped"][:, 0].tolist() == [True, False]


def test_first_trained_position_and_skipped_logits_align(tiny_model):
    from transformers import AutoModelForCausalLM

    from appliance.training.loss import first_trained_position, token_logps

    b = pack([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14]], [[0, 0, 0, 1, 0, 1], [0, 0, 0, 0]], [[0.0] * 6, [0.0] * 4],
             [1.0, 0.0], pad_id=0, max_len=16)
    assert first_trained_position(b.mask) == 2
    assert first_trained_position(torch.zeros(2, 3)) == 0
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        full = token_logps(model, b.input_ids, b.attention_mask)
        cut = token_logps(model, b.input_ids, b.attention_mask, start=2)
    assert cut.shape == (2, 3) and torch.allclose(full[:, 2:], cut, atol=1e-5)
