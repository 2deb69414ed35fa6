"""The GRPO-family policy loss over appliance samples, following TRL 1.16's `GRPOTrainer._compute_loss`.

Why not call TRL's trainer: see docs/DESIGN.md, "Learning: how we use TRL". In short, TRL's GRPO trainer
owns generation and the group baseline, while ours come from the store (multi-turn sequences with several
trained spans, infra errors out of the baseline, branches sharing an advantage). So we keep TRL's maths and
option names (loss_type, epsilon/epsilon_high, beta, its vLLM importance-sampling modes) and feed it our
tensors; `tests/training/test_loss.py` pins the formulas.

Shapes: B sequences, L tokens. Position t of the (B, L-1) tensors is token t+1 of the sequence, predicted
from tokens 0..t. `mask` is 1 exactly where the engine sampled the token (the Sample's mask, shifted).

Two different ratios appear, as in TRL:
- the *policy* ratio pi_theta / pi_old, clipped by epsilon (PPO). pi_old is the trainer's logprob at the
  start of the LEARN phase, computed once before any update (TRL computes it at generation time): on the
  phase's first GRPO step the ratio is 1 with a gradient; on later steps (or after the SFT update of
  method=both) it measures how far the policy moved, and the clip keeps the trust region;
- the *engine* importance ratio pi_old / pi_engine against the logprobs the engine recorded while
  sampling: the correction for the engine and trainer not being the same numerical function (bf16 serving,
  other kernels) or the engine lagging a version behind. It is truncated (capped) or masked (tokens or
  sequences outside [is_min, is_cap] dropped) as TRL's `vllm_importance_sampling_mode`.

Both are taken at the temperature each token was sampled at: the engine serves processed logprobs (after
temperature scaling) and the trainer divides its logits by the temperature recorded with the call, so the
behaviour policy and pi_old are the same distribution (TRL divides by `args.temperature` the same way).

The unit of the grpo/gspo/dr_grpo normalisers is the rollout, not the sample: a rollout whose history was
rewritten has several samples (branches), and dividing by the sample count would weigh it k times. A row's
token sum is divided by its rollout's trained tokens over all its branches (`units`), and the step's sum
by the number of rollouts, so a k-branch rollout weighs exactly as the same tokens in one sequence would.
(GSPO's sequence-level ratio is still taken per branch: the weights are the same, the ratio of a rollout
spread over several branches is not pooled across them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

if TYPE_CHECKING:  # only the field names are used: scripts/device_train_check.py passes a plain namespace
    from appliance.config import TrainingSettings


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # (B, L) right-padded
    attention_mask: torch.Tensor  # (B, L)
    mask: torch.Tensor  # (B, L-1) float, 1 on engine-sampled target tokens
    engine_logps: torch.Tensor  # (B, L-1) engine logprob of each target token (0 where mask is 0)
    advantages: torch.Tensor  # (B,), or (B, L-1) per token (turn-level credit)
    temperatures: torch.Tensor | None = None  # (B,) the sampling temperature of each row (None: 1.0)
    units: torch.Tensor | None = None  # (B,) trained tokens of each row's rollout, all branches (None: the row's)

    @property
    def trained_tokens(self) -> int:
        return int(self.mask.sum().item())

    @property
    def temperature(self) -> float | torch.Tensor:
        """What `token_logps` divides the logits by: the rows' temperatures, 1.0 when none were packed."""
        return 1.0 if self.temperatures is None else self.temperatures


def pack(token_ids: list[list[int]], masks: list[list[int]], logprobs: list[list[float]],
         advantages: list[float], *, pad_id: int, max_len: int, temperatures: list[float] | None = None,
         units: list[float] | None = None, token_advantages: list[list[float]] | None = None) -> PackedBatch:
    """Right-pad samples into tensors; sequences longer than `max_len` are cut at the end.

    Only the end can go: every kept token keeps its exact prefix, so what is trained is still what the
    engine saw; a cut-off tail is not trained (its context would be gone). `trajectories.truncation` counts it.
    """
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
    adv = torch.tensor(advantages, dtype=torch.float32)
    if token_advantages is not None:
        per_token = torch.zeros((b, length), dtype=torch.float32)
        for i, a in enumerate(token_advantages):
            n = min(len(a), length)
            per_token[i, :n] = torch.tensor(a[:n], dtype=torch.float32)
        adv = per_token[:, 1:]
    # Token 0 has no context to be predicted from; a sample never trains on it.
    return PackedBatch(ids, attn, mask[:, 1:], eng[:, 1:] * mask[:, 1:], adv,
                       None if temperatures is None else torch.tensor(temperatures, dtype=torch.float32),
                       None if units is None else torch.tensor(units, dtype=torch.float32))


def token_logps(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                temperature: float | torch.Tensor = 1.0, start: int = 0, entropy: list[float] | None = None,
                entropy_mask: torch.Tensor | None = None, hidden: list[torch.Tensor] | None = None) -> torch.Tensor:
    """(B, L-1-start) log-probability of tokens start+1..L-1 given their prefix, in fp32, at `temperature`
    (a float, or a (B,) tensor: one per row).

    `start` skips the leading positions no sample trains on (the shared system prompt and first user
    turn): the (B, L, vocab) logits are the step's largest tensor, and most of them would be prompt.
    When `entropy` is a list, the sum of the token entropies (nats, no gradient) where `entropy_mask` is
    set (every position without one) is appended to it: only trained positions, the full-vocabulary
    softmax is not free. When `hidden` is a list, the final hidden states of positions start..L-1
    (B, L-start, H), detached, are appended to it: what the value head reads. They are caught on their way
    into the LM head (a forward pre-hook), so there is no second forward pass and no copy of every layer's
    states (`output_hidden_states` would keep all of them alive: a GB per sequence for a 7B model).
    """
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    keep = input_ids.shape[1] - start
    hook = None
    if hidden is not None:
        lm_head = cast(Any, model).get_output_embeddings()  # a transformers model (nn.Module in the signature)
        hook = lm_head.register_forward_pre_hook(
            lambda _module, args: hidden.append(args[0].detach()))
    try:
        out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep)
    finally:
        if hook is not None:
            hook.remove()
    logits = out.logits[:, :-1, :]
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.to(logits.device).view(-1, 1, 1)
    logits = logits.float() / temperature
    if entropy is not None:
        with torch.no_grad():
            rows = logits.detach()[entropy_mask > 0] if entropy_mask is not None else logits.detach().flatten(0, 1)
            entropy.append(float(entropy_from_logits(rows).sum()) if rows.numel() else 0.0)
    return selective_log_softmax(logits, input_ids[:, start + 1:])


def first_trained_position(mask: torch.Tensor) -> int:
    """The first column of a (B, L-1) mask with a trained token in any row (0 when there is none)."""
    cols = mask.sum(0).nonzero()
    return int(cols[0]) if len(cols) else 0


@dataclass
class Normaliser:
    """The denominators of one optimizer step, over all its micro-batches (TRL's aggregation per loss type)."""

    sequences: int  # rollouts (the unit: a rollout's branches count once)
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
                cfg: TrainingSettings, norm: Normaliser,
                units: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's share of the step loss (sum over micro-batches = TRL's loss for the whole step).

    `units` (B,): the trained tokens of each row's rollout over all its branches (default: the row's own,
    TRL's per-sequence mean when every rollout is one sequence)."""
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
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
        denom = mask.sum(-1) if units is None else units.to(mask.device)
        loss = (per_token.sum(-1) / denom.clamp(min=1.0)).sum() / norm.sequences
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


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss per turn, 0.5 * max((V - G)^2, (V_clip - G)^2) with V_clip = V_old +
    clamp(V - V_old, -clip, clip) (the critic's trust region, as the policy's), and which turns the clipped
    term decided. Sums, not means: the caller divides by the step's turns."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    plain, capped = (values - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * torch.maximum(plain, capped).sum(), capped > plain
