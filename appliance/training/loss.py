"""The GRPO-family policy loss over appliance samples, following TRL 1.16's `GRPOTrainer._compute_loss`.

Why not call TRL's trainer: see docs/DESIGN.md, "Learning: how we use TRL". In short, TRL's GRPO trainer
owns generation and the group baseline, while ours come from the store (multi-turn sequences with several
trained spans, infra errors out of the baseline, branches sharing an advantage). So we keep TRL's maths and
option names (loss_type, epsilon/epsilon_high, beta, its vLLM importance-sampling modes) and feed it our
tensors; `tests/training/test_loss.py` pins the formulas.

Shapes: B sequences, L tokens. Position t of the (B, L-1) tensors is token t+1 of the sequence, predicted
from tokens 0..t. `mask` is 1 exactly where the engine sampled the token (the Sample's mask, shifted).

Two different ratios appear, as in TRL:
- the *policy* ratio pi_theta / pi_old, clipped by epsilon (PPO). We take one optimizer step per batch of
  fresh rollouts, so pi_old is the trainer's own detached logprob and the ratio is 1 with a gradient;
- the *engine* importance ratio pi_old / pi_engine against the logprobs the engine recorded while
  sampling: the correction for the engine and trainer not being the same numerical function (bf16 serving,
  other kernels) or the engine lagging a version behind. It is truncated (capped) or masked (tokens or
  sequences outside [is_min, is_cap] dropped) as TRL's `vllm_importance_sampling_mode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # only the field names are used: scripts/device_train_check.py passes a plain namespace
    from appliance.config import TrainingSettings


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # (B, L) right-padded
    attention_mask: torch.Tensor  # (B, L)
    mask: torch.Tensor  # (B, L-1) float, 1 on engine-sampled target tokens
    engine_logps: torch.Tensor  # (B, L-1) engine logprob of each target token (0 where mask is 0)
    advantages: torch.Tensor  # (B,)

    @property
    def trained_tokens(self) -> int:
        return int(self.mask.sum().item())


def pack(token_ids: list[list[int]], masks: list[list[int]], logprobs: list[list[float]],
         advantages: list[float], *, pad_id: int, max_len: int) -> PackedBatch:
    """Right-pad samples into tensors; sequences longer than `max_len` are cut at the end."""
    length = min(max(len(t) for t in token_ids), max_len)
    b = len(token_ids)
    ids = torch.full((b, length), pad_id, dtype=torch.long)
    attn = torch.zeros((b, length), dtype=torch.long)
    mask = torch.zeros((b, length), dtype=torch.float32)
    eng = torch.zeros((b, length), dtype=torch.float32)
    for i, (t, m, lp) in enumerate(zip(token_ids, masks, logprobs, strict=True)):
        n = min(len(t), length)
        ids[i, :n] = torch.tensor(t[:n])
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(m[:n], dtype=torch.float32)
        eng[i, :n] = torch.tensor(lp[:n], dtype=torch.float32)
    # Token 0 has no context to be predicted from; a sample never trains on it.
    return PackedBatch(ids, attn, mask[:, 1:], eng[:, 1:] * mask[:, 1:], torch.tensor(advantages, dtype=torch.float32))


def token_logps(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                temperature: float = 1.0, start: int = 0) -> torch.Tensor:
    """(B, L-1-start) log-probability of tokens start+1..L-1 given their prefix, in fp32.

    `start` skips the leading positions no sample trains on (the shared system prompt and first user
    turn): the (B, L, vocab) logits are the step's largest tensor, and most of them would be prompt.
    """
    from trl.trainer.utils import selective_log_softmax

    keep = input_ids.shape[1] - start
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits[:, :-1, :]
    return selective_log_softmax(logits.float() / temperature, input_ids[:, start + 1:])


def first_trained_position(mask: torch.Tensor) -> int:
    """The first column of a (B, L-1) mask with a trained token in any row (0 when there is none)."""
    cols = mask.sum(0).nonzero()
    return int(cols[0]) if len(cols) else 0


@dataclass
class Normaliser:
    """The denominators of one optimizer step, over all its micro-batches (TRL's aggregation per loss type)."""

    sequences: int
    tokens: int
    max_len: int  # dr_grpo's constant (TRL's max_completion_length)


def engine_is_ratio(old_logps: torch.Tensor, engine_logps: torch.Tensor, mask: torch.Tensor,
                    cfg: TrainingSettings) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The correction weight per token (B, L-1) or per sequence (B, 1), and raw stats for the metrics."""
    diff = (old_logps - engine_logps) * mask
    sequence_level = cfg.is_mode.startswith("sequence")
    log_ratio = diff.sum(-1, keepdim=True) if sequence_level else diff
    raw = torch.exp(log_ratio)
    weight_mask = (mask.sum(-1, keepdim=True) > 0).float() if sequence_level else mask
    if cfg.is_mode == "none":
        ratio, clipped = torch.ones_like(raw), torch.zeros_like(raw, dtype=torch.bool)
    elif cfg.is_mode.endswith("truncate"):
        ratio = torch.clamp(raw, min=cfg.is_min, max=cfg.is_cap)
        clipped = ratio != raw
    else:
        low = cfg.is_min if cfg.is_min is not None else 0.0
        clipped = (raw < low) | (raw > cfg.is_cap)
        ratio = raw.masked_fill(clipped, 0.0)
    return ratio, {"raw": raw, "clipped": clipped & (weight_mask > 0), "weight_mask": weight_mask}


def policy_loss(logps: torch.Tensor, old_logps: torch.Tensor, ref_logps: torch.Tensor | None,
                is_ratio: torch.Tensor | None, mask: torch.Tensor, advantages: torch.Tensor,
                cfg: TrainingSettings, norm: Normaliser) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's share of the step loss (sum over micro-batches = TRL's loss for the whole step)."""
    adv = advantages.unsqueeze(1)
    log_ratio = logps - old_logps
    if cfg.loss_type == "gspo":
        # GSPO: one length-normalised ratio per sequence (TRL's importance_sampling_level="sequence").
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_ratio)
    kl = None
    if cfg.beta != 0.0 and ref_logps is not None:
        # k3 estimator of KL(pi_theta || pi_ref), weighted by the policy ratio (TRL's default
        # use_bias_correction_kl: the tokens were sampled from pi_old, not pi_theta).
        kl = (torch.exp(ref_logps - logps) - (ref_logps - logps) - 1) * coef_1
    eps_high = cfg.epsilon_high if cfg.epsilon_high is not None else cfg.epsilon
    coef_2 = torch.clamp(coef_1, 1 - cfg.epsilon, 1 + eps_high)
    per_token = -torch.min(coef_1 * adv, coef_2 * adv)
    if is_ratio is not None:
        per_token = per_token * is_ratio
    if kl is not None:
        per_token = per_token + cfg.beta * kl
    per_token = per_token.expand_as(mask) * mask
    if cfg.loss_type in ("grpo", "gspo"):
        loss = (per_token.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / norm.sequences
    elif cfg.loss_type == "dapo":
        loss = per_token.sum() / max(norm.tokens, 1)
    elif cfg.loss_type == "dr_grpo":
        loss = per_token.sum() / (norm.sequences * norm.max_len)
    else:  # config validation makes this unreachable; keep the failure loud
        raise ValueError(f"unknown loss_type {cfg.loss_type!r}")
    clipped = ((coef_1 < 1 - cfg.epsilon) & (adv < 0)) | ((coef_1 > 1 + eps_high) & (adv > 0))
    stats = {"clip_ratio": float((clipped.expand_as(mask).float() * mask).sum() / mask.sum().clamp(min=1.0))}
    if kl is not None:
        stats["kl"] = float((kl.detach() * mask).sum() / mask.sum().clamp(min=1.0))
    return loss, stats
