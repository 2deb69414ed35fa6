"""SFT on the policy's own successful trajectories (rejection sampling) and on demonstrations.

The samples are already tokenized (the exact ids the engine saw and sampled, or a demonstration's chat
template ids), and their mask says which tokens are the assistant's: the loss is the mean negative
log-likelihood of those tokens only, never of the prompt, tool output or environment text (TRL's
`SFTTrainer` with `assistant_masks`, loss type "nll": a token mean over the optimizer step).

Why our own loop and not `SFTTrainer`: almost every sample starts with the same tokens (the harness's
system prompt and the `Task: ` line, ~150 of a demonstration's ~250) and trains only on the ~35 tokens at
its end. `SFTTrainer` runs every sample's whole sequence through the model; here each forward pass runs
the batch's shared prefix once and the suffixes on top of its key/value cache (`shared_prefix_nll`). The
prefix stays in the autograd graph (the adapter changes its keys and values too), so loss and gradient are
those of the full sequences, to float rounding (tests/training/test_sft.py) — it is not a detached cache.
Batches are drawn by length (shuffled pools sorted by length), so the suffixes pad little, and the LM
head runs only on trained positions (as TRL's fused head does), so a forward never builds a (B, L, vocab)
tensor and several sequences fit where a GRPO step fits one.

One optimizer step per `training.sft_batch_size` samples, fresh AdamW (per phase: a phase stopped between
two of its steps keeps it in `SftState` and goes on with it, see `midway.py`) at `sft_learning_rate` with a linear
decay to 0 (the Trainer's default schedule), gradients clipped at `max_grad_norm`. A forward pass holds at
most `micro_batch_size x max_seq_len` tokens (the memory the settings already allow a GRPO micro-batch), so
a step may take several. In a process group (a multi-process LEARN phase) every rank takes every world-th
sample of each step, normalises by the whole step's token count, and the gradients are summed
(`distributed.all_reduce_grads`): the one-process step, as for GRPO.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from appliance.errors import Interrupted
from appliance.schemas import Outcome, Rollout, Sample

if TYPE_CHECKING:
    from appliance.config import TrainingSettings
    from appliance.training.trainer import PolicyTrainer

MIN_SHARED_PREFIX = 16  # shorter common prefixes are not worth a second forward call


@dataclass
class SftState:
    """How far the phase's SFT got: optimizer steps done, their losses and tokens, and (once it stopped
    between two steps) its AdamW and schedule state, so it goes on exactly where it stopped."""

    done: int = 0
    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    optimizer: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None


def successful_samples(rollouts: list[Rollout], samples: list[Sample]) -> list[Sample]:
    """The samples of rollouts that succeeded (rejection sampling keeps nothing else)."""
    ok = {r.id for r in rollouts if r.outcome == Outcome.SUCCESS}
    return [s for s in samples if s.rollout_id in ok and any(s.mask)]


def own_successes(cfg: TrainingSettings, rollouts: list[Rollout], samples: list[Sample]) -> list[Sample]:
    """What SFT trains on of the iteration's own rollouts: their successes with method sft or both, while
    `training.sft_on_successes` (the learning bench switches it off to measure what it adds)."""
    if cfg.method not in ("sft", "both") or not cfg.sft_on_successes:
        return []
    return successful_samples(rollouts, samples)


def trained_positions(sample: Sample, max_len: int) -> list[int]:
    """Positions whose token the loss predicts: masked, within max_len, never token 0 (it has no context)."""
    return [j for j, m in enumerate(sample.mask[:max_len]) if m and j > 0]


def plan_batches(samples: list[Sample], batch_size: int, epochs: float, seed: int, *,
                 pool_batches: int = 8) -> list[list[Sample]]:
    """The phase's optimizer steps: per epoch the samples shuffled, cut into pools of `pool_batches`
    batches, each pool sorted by length and cut into batches (similar lengths pad little), the batch order
    shuffled again. A fractional epoch count ends part-way through the last epoch (as the Trainer does)."""
    rng = random.Random(f"sft:{seed}")
    per_epoch = math.ceil(len(samples) / batch_size)
    total = max(1, math.ceil(epochs * per_epoch))
    out: list[list[Sample]] = []
    while len(out) < total:
        order = list(samples)
        rng.shuffle(order)
        pool = batch_size * pool_batches
        batches = []
        for i in range(0, len(order), pool):
            chunk = sorted(order[i: i + pool], key=lambda s: len(s.token_ids))
            batches += [chunk[j: j + batch_size] for j in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        out += batches
    return out[:total]


def forward_chunks(batch: list[Sample], max_tokens: int, max_len: int) -> list[list[Sample]]:
    """The step's forward passes: consecutive samples (the batch is sorted by length within its pool) while
    the padded size stays within `max_tokens` (a single sample always gets its own pass)."""
    chunks: list[list[Sample]] = []
    current: list[Sample] = []
    for s in sorted(batch, key=lambda s: len(s.token_ids)):
        longest = max([min(len(x.token_ids), max_len) for x in current + [s]])
        if current and longest * (len(current) + 1) > max_tokens:
            chunks.append(current)
            current = []
        current.append(s)
    if current:
        chunks.append(current)
    return chunks


def shared_prefix_length(samples: list[Sample], max_len: int) -> int:
    """Tokens every sample starts with and none trains on or predicts from (0 when not worth sharing)."""
    if len(samples) < 2:
        return 0
    ids = [s.token_ids[:max_len] for s in samples]
    common = 0
    for column in zip(*ids, strict=False):
        if any(t != column[0] for t in column):
            break
        common += 1
    # a trained token at j is predicted from the hidden state at j-1, which must come from the suffix pass
    first = min((trained_positions(s, max_len) or [max_len])[0] for s in samples)
    shared = min(common, first - 1)
    return shared if shared >= MIN_SHARED_PREFIX else 0


def shared_prefix_nll(model: Any, samples: list[Sample], *, max_len: int, pad_id: int) -> tuple[Any, int]:
    """(summed NLL of the samples' trained tokens, their count): one forward over the shared prefix, its
    key/value cache repeated for every sample, one forward over the right-padded suffixes. Exact: the
    prefix is part of the graph, so the gradient is that of running every full sequence."""
    import torch
    from transformers import DynamicCache

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper, or full weights
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    device = next(model.parameters()).device
    # gradient checkpointing drops a cache in training mode: run the whole sequences then (a model class
    # without the attribute has no checkpointing)
    prefix = 0 if getattr(base, "is_gradient_checkpointing", False) else shared_prefix_length(samples, max_len)
    ids = [s.token_ids[:max_len] for s in samples]
    width = max(len(t) for t in ids) - prefix
    suffix = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), prefix + width), dtype=torch.long)
    rows, cols, labels = [], [], []
    for i, (s, t) in enumerate(zip(samples, ids, strict=True)):
        suffix[i, : len(t) - prefix] = torch.tensor(t[prefix:])
        attention[i, : len(t)] = 1
        for j in trained_positions(s, max_len):
            rows.append(i)
            cols.append(j - 1 - prefix)  # the hidden state that predicts token j
            labels.append(t[j])
    if not labels:
        return torch.zeros((), device=device), 0
    cache = None
    if prefix:
        cache = DynamicCache(config=base.config)
        decoder(input_ids=torch.tensor([ids[0][:prefix]], device=device), past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(len(samples))
    hidden = decoder(input_ids=suffix.to(device), attention_mask=attention.to(device), past_key_values=cache,
                     use_cache=cache is not None).last_hidden_state
    picked = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]
    logits = head(picked).float()
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(labels, device=device), reduction="sum")
    return nll, len(labels)


def sft_plan(cfg: Any, samples: list[Sample]) -> list[list[Sample]]:
    """The phase's SFT optimizer steps (batches) over the samples with a trained token; [] when none has one."""
    samples = [s for s in samples if trained_positions(s, cfg.max_seq_len)]
    return plan_batches(samples, cfg.sft_batch_size, cfg.sft_epochs, cfg.seed) if samples else []


def sft(policy: PolicyTrainer, samples: list[Sample], safe_point: Callable[[], None] | None = None,
        state: SftState | None = None) -> dict[str, float]:
    """Train `policy` (a `PolicyTrainer`) in place on `samples`; returns loss, steps and trained tokens.

    `safe_point` is called before each optimizer step: it waits while a pause holds training and raises
    Interrupted to stop it (a warm-start SFT is twenty minutes on the CPU: a stop must not wait for it).
    `state` is updated as steps end; on Interrupted it also holds the optimizer's and schedule's state, and
    a later call with it goes on from the next step (the metrics are those of the whole SFT).
    """
    cfg = policy.cfg
    state = state if state is not None else SftState()
    batches = sft_plan(cfg, samples)
    if not batches:
        return {"sft_loss": 0.0, "sft_steps": 0, "sft_tokens": 0}
    import torch

    from appliance.training.distributed import all_reduce_grads

    model = policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.sft_lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / len(batches))
    if state.optimizer is not None and state.schedule is not None:
        optimizer.load_state_dict(state.optimizer)
        schedule.load_state_dict(state.schedule)
    rank, world = policy.rank, policy.world
    max_tokens = cfg.micro_batch_size * cfg.max_seq_len
    model.train()
    try:
        for batch in batches[state.done:]:
            if safe_point is not None:
                safe_point()
            step_tokens = sum(len(trained_positions(s, cfg.max_seq_len)) for s in batch)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for chunk in forward_chunks(batch[rank::world], max_tokens, cfg.max_seq_len):
                nll, _ = shared_prefix_nll(model, chunk, max_len=cfg.max_seq_len, pad_id=policy.pad_id)
                loss = nll / step_tokens
                loss.backward()
                step_loss += float(loss.detach())
            if world > 1:
                all_reduce_grads(params)
                from appliance.training.distributed import gather_partials

                step_loss = sum(p["loss"] for p in gather_partials({"loss": step_loss}))
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()
            schedule.step()
            state.losses.append(step_loss)
            state.tokens += step_tokens
            state.done += 1
    except Interrupted:
        optimizer.zero_grad(set_to_none=True)
        state.optimizer, state.schedule = optimizer.state_dict(), schedule.state_dict()
        raise
    optimizer.zero_grad(set_to_none=True)
    return {"sft_loss": sum(state.losses) / len(state.losses), "sft_steps": len(batches), "sft_tokens": state.tokens}
