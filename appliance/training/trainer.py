"""The policy trainer: loads the policy (LoRA adapter by default, all weights by option), takes GRPO steps
on grouped samples, saves checkpoints the engine can load, and resumes from them.

A checkpoint folder is exactly what the engine loads, plus a `trainer/` subfolder with the optimizer
state: `lora` = a peft adapter folder (adapter_config.json + adapter_model.safetensors, what vLLM's
/v1/load_lora_adapter reads; the engine keeps serving the base model underneath), `full` = a safetensors
Hugging Face folder with config and tokenizer (what vLLM's reload_weights reads).

One optimizer step per `grpo_step` call; micro-batches accumulate gradients. The samples of a phase are
the fresh rollouts of the current policy version; `freeze_old_logps` records pi_old for all of them before
the phase's first update, so each step's PPO ratio and clip are against the policy that sampled them (the
ratio is 1 on the first step, and moves on the later steps of the phase and after an SFT update). A step
with no non-zero advantage and no KL term is not taken: AdamW would move the weights on momentum alone.
Built inside a torch.distributed process group (a worker of `training.processes` > 1), the trainer is one
data-parallel replica: it trains its shard of each step's groups and sums gradients with the others.

The value head (the critic of `training.method = "ppo"` and GRPO's `turn_credit`) is `critic.Critic`.
"""

from __future__ import annotations

import errno
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from appliance.config import TrainingSettings
from appliance.errors import DiskFull, TrainingError  # TrainingError: importable from here as before
from appliance.schemas import Sample
from appliance.training.advantages import GroupedBatch
from appliance.training.credit import TurnId
from appliance.training.critic import VALUE_HEAD_FILE, Critic
from appliance.training.distributed import all_reduce_grads, broadcast_params, gather_partials, shard_groups, world
from appliance.training.loss import (
    Normaliser,
    PackedBatch,
    engine_is_ratio,
    first_trained_position,
    pack,
    policy_loss,
    token_logps,
)
from appliance.trajectories import truncation

OPTIMIZER_FILE = "trainer/optimizer.pt"


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


# Projections some architectures fuse into one module (Phi 3: qkv_proj, gate_up_proj); vLLM's LoRA loader
# takes the fused module as the model declares it.
FUSED_PROJECTIONS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def lora_targets(model: Any, wanted: Sequence[str]) -> list[str]:
    """The module names of `wanted` this model has, with a fused projection standing for its parts.

    peft adapts whatever subset of the names it finds and says nothing of the rest: on Phi 3 the default
    list silently trained o_proj and down_proj only. A name none of whose modules exist is an error."""
    import torch

    linear = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    out = [name for name in wanted if name in linear]
    out += [fused for fused, parts in FUSED_PROJECTIONS.items()
            if fused in linear and fused not in out and any(p in wanted for p in parts)]
    covered = set(out) | {p for fused in out for p in FUSED_PROJECTIONS.get(fused, ())}
    missing = [name for name in wanted if name not in covered]
    if missing or not out:
        raise TrainingError(f"the model has no {', '.join(missing or list(wanted))} module for LoRA "
                            f"(its linear modules: {', '.join(sorted(linear))})",
                            "set training.lora_targets to names of the model's own projection modules")
    return out


class PolicyTrainer(Critic):
    def __init__(self, cfg: TrainingSettings, base_model: Path, *, resume_from: Path | None = None,
                 resume_kind: str | None = None, device: torch.device | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg
        self.base_model = Path(base_model)
        self.device = device or pick_device()
        if self.device.type == "cpu":  # a worker's accelerate state says cpu:0, which torch.load cannot map to
            self.device = torch.device("cpu")
        self.kind = "full" if cfg.full_finetune else "lora"
        if resume_kind is not None and resume_kind != self.kind:
            raise TrainingError(
                f"the latest checkpoint is a {resume_kind!r} checkpoint but training.full_finetune asks for "
                f"{self.kind!r}",
                "keep training.full_finetune as it was for this run, or start a new run",
            )
        dtype = getattr(torch, cfg.dtype)  # the setting names a torch dtype ("bfloat16"), checked by config
        weights = resume_from if (resume_from is not None and self.kind == "full") else self.base_model
        if not (weights / "config.json").exists():
            raise TrainingError(f"no Hugging Face model folder at {weights}",
                                "run `appliance init` to convert the bundled model, or set engine.model")
        torch.manual_seed(cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        # Any, as Critic.model: a transformers model or a peft model around it share no type, and transformers
        # types .to() through functools.wraps, which mypy does not bind as a method
        model: Any = AutoModelForCausalLM.from_pretrained(weights, dtype=dtype)
        if self.kind == "lora":
            from peft import LoraConfig, PeftModel, get_peft_model

            if resume_from is not None:
                model = PeftModel.from_pretrained(model, resume_from, is_trainable=True)
            else:
                model = get_peft_model(model, LoraConfig(
                    r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                    target_modules=lora_targets(model, cfg.lora_targets), task_type="CAUSAL_LM"))
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            if self.kind == "lora":
                model.enable_input_require_grads()
        self.model = model.to(self.device)
        self.ref_model: Any = None
        if cfg.beta != 0.0 and self.kind == "full":
            # With LoRA the reference is the same model with the adapter disabled; a full fine-tune needs a copy.
            ref: Any = AutoModelForCausalLM.from_pretrained(self.base_model, dtype=dtype)  # Any: .to(), as above
            self.ref_model = ref.to(self.device).eval()
        params = [p for p in self.model.parameters() if p.requires_grad]
        # in a process group (a worker of a multi-process LEARN phase): this rank of `world` replicas
        self.rank, self.world = world()
        if self.world > 1:
            broadcast_params(params)
        self.optimizer = torch.optim.AdamW(params, lr=cfg.rl_lr, weight_decay=cfg.weight_decay)
        if resume_from is not None and (resume_from / OPTIMIZER_FILE).exists():
            self.optimizer.load_state_dict(torch.load(resume_from / OPTIMIZER_FILE, map_location=self.device))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.old_logps: dict[tuple[str, int], list[float]] = {}  # pi_old of the phase, by (rollout, branch)
        self.value_head: torch.nn.Linear | None = None
        self.old_values: dict[TurnId, float] = {}  # V at the start of the phase, by turn
        self.returns: dict[TurnId, float] = {}  # the value targets (lambda-returns) of the phase
        self.depth: dict[TurnId, int] = {}  # turn index of each trained turn (a metric)
        if cfg.method == "ppo" or cfg.turn_credit > 0:
            self._build_value_head(resume_from)

    # --- GRPO ---------------------------------------------------------------------------------
    def pack(self, samples: list[Sample], *, logprobs: list[list[float]] | None = None,
             units: dict[str, int] | None = None) -> PackedBatch:
        """Samples as tensors; `logprobs` replaces the engine's (to pack pi_old the same way)."""
        per_token = any(s.token_advantages is not None for s in samples)
        return pack([s.token_ids for s in samples], [s.mask for s in samples],
                    logprobs if logprobs is not None else [s.logprobs for s in samples],
                    [float(s.advantage or 0.0) for s in samples], pad_id=self.pad_id, max_len=self.cfg.max_seq_len,
                    temperatures=[s.temperature for s in samples],
                    units=None if units is None else [units[s.rollout_id] for s in samples],
                    token_advantages=[s.token_advantages or [float(s.advantage or 0.0)] * len(s.token_ids)
                                      for s in samples] if per_token else None)

    def logps(self, samples: list[Sample], *, temperature: float | None = None,
              values: dict[TurnId, float] | None = None) -> list[list[float]]:
        """The trainer's logprob of every token given its prefix (0.0 for token 0): the engine's counterpart,
        at each sample's sampling temperature (or at `temperature` for all). With `values` (and a value
        head), V(state) of each of the samples' turns is written into it, from the same forward pass."""
        out = []
        self.model.eval()
        with torch.no_grad():
            for i in range(0, len(samples), self.cfg.micro_batch_size):
                chunk = samples[i: i + self.cfg.micro_batch_size]
                b = self.pack(chunk)
                t = b.temperature if temperature is None else temperature
                hidden: list[torch.Tensor] | None = [] if values is not None and self.value_head else None
                lp = token_logps(self.model, b.input_ids.to(self.device), b.attention_mask.to(self.device), t,
                                 hidden=hidden).cpu()
                out += [[0.0] + lp[j, : len(s.token_ids) - 1].tolist() for j, s in enumerate(chunk)]
                if hidden and values is not None:
                    for tid, v in zip(*self._turn_values(chunk, hidden[0], 0), strict=True):
                        values[tid] = float(v)
        return out

    def share(self, batch: GroupedBatch) -> list[Sample]:
        """The samples of a step this replica trains (all of them in a single process)."""
        trainable = self.trainable(batch.samples)
        if self.world == 1:
            return trainable
        return shard_groups(trainable, self.rank, self.world, max_len=self.cfg.max_seq_len)

    def freeze_old_logps(self, parts: list[GroupedBatch]) -> None:
        """Record pi_old of every sample this replica will train in the phase, before any update, and (with a
        value head) V_old of every turn: the critic the phase's credit and value clipping are taken against.
        With a value head every replica records all the step's samples: a turn's credit needs its whole tree."""
        if self.value_head is not None:
            mine = [s for part in parts for s in self.trainable(part.samples)]
        else:
            mine = [s for part in parts for s in self.share(part)]
        values: dict[TurnId, float] | None = {} if self.value_head is not None else None
        self.old_logps = {(s.rollout_id, s.branch): lp
                          for s, lp in zip(mine, self.logps(mine, values=values), strict=True)}
        self.old_values = values or {}

    def grpo_step(self, batch: GroupedBatch) -> dict[str, float]:
        """One optimizer step on the grouped samples; returns the step's metrics (see `appliance train`).

        In a process group (a worker of a multi-process LEARN phase) this rank trains on its shard of the
        step's whole groups, the loss still normalised over the whole step; the gradients and the
        statistics are summed over the ranks before the (identical) optimizer step. See `distributed.py`.
        """
        cfg, t0 = self.cfg, time.perf_counter()
        cut_tokens, cut_rollouts = truncation(batch.samples, cfg.max_seq_len)
        turns = list(batch.turns.values())
        metrics: dict[str, float] = {
            "reward_mean": batch.reward_mean, "reward_std": batch.reward_std,
            "valid_groups": batch.valid_groups, "dropped_groups": batch.dropped_groups,
            "zero_std_groups": batch.zero_std_groups, "groups_with_signal": batch.signal_groups,
            "infra_error_rate": batch.infra_error_rate, "rollouts": batch.rollouts, "samples": len(batch.samples),
            "truncated_tokens": cut_tokens, "truncated_rollouts": cut_rollouts,
            "turns_mean": sum(turns) / len(turns) if turns else 0.0,
        }
        trainable = self.trainable(batch.samples)
        policy_signal = cfg.beta != 0.0 or any(_has_advantage(s) for s in trainable)
        value_turns = self._value_turns(trainable)
        value_signal = any(abs(self.returns[t] - self.old_values.get(t, 0.0)) > 0 for t in value_turns)
        if not policy_signal and not value_signal:
            trainable = []  # nothing to learn: no step, so the weights (and AdamW's state) stay as they are
        if not trainable:
            metrics.update(loss=0.0, trained_tokens=0, step_time_s=time.perf_counter() - t0, tokens_per_s=0.0,
                           skipped_steps=1.0)
            return metrics
        norm = self.normaliser(trainable)
        units = self.units(trainable)
        mine = self.share(batch)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.value_head is not None:
            self.value_optimizer.zero_grad(set_to_none=True)
        partial = self.backward(mine, norm, units, value_turns=max(len(value_turns), 1))
        params = [p for p in self.model.parameters() if p.requires_grad]
        head = list(self.value_head.parameters()) if self.value_head is not None else []
        if self.world > 1:
            all_reduce_grads(params + head)
            partial = _combine(gather_partials(partial))
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        if policy_signal:  # a step with the critic's work only leaves the policy (and AdamW's moments) alone
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.value_head is not None:
            torch.nn.utils.clip_grad_norm_(head, cfg.max_grad_norm)
            self.value_optimizer.step()
            self.value_optimizer.zero_grad(set_to_none=True)
            metrics.update(self._value_metrics(trainable, value_turns, partial))
        step_time = time.perf_counter() - t0
        metrics.update(
            loss=partial["loss"], grad_norm=float(grad_norm), trained_tokens=norm.tokens if policy_signal else 0,
            tokens=partial["tokens"],
            step_time_s=step_time, tokens_per_s=partial["tokens"] / step_time,
            logprob_gap_mean=partial["gap_sum"] / partial["gap_n"], logprob_gap_max=partial["gap_max"],
            entropy=partial["entropy_sum"] / max(partial["gap_n"], 1),
            response_tokens_mean=norm.tokens / norm.sequences, skipped_steps=0.0,
        )
        if partial["ratio_n"]:
            metrics.update(is_ratio_mean=partial["ratio_sum"] / partial["ratio_n"], is_ratio_min=partial["ratio_min"],
                           is_ratio_max=partial["ratio_max"], is_clipped_frac=partial["clipped"] / partial["ratio_n"])
        total = partial["extra_n"] or 1
        for key, value in partial["extra"].items():
            metrics[key] = value / total
        return metrics

    def trainable(self, samples: list[Sample]) -> list[Sample]:
        """The samples with a trained token within max_seq_len (the others add nothing to a step)."""
        return [s for s in samples if any(s.mask[1: self.cfg.max_seq_len])]

    def normaliser(self, trainable: list[Sample]) -> Normaliser:
        """The step's denominators, over every sample of the step, whichever rank trains it; the unit is
        the rollout (its branches count once)."""
        return Normaliser(sequences=len({s.rollout_id for s in trainable}),
                          tokens=sum(sum(s.mask[1: self.cfg.max_seq_len]) for s in trainable),
                          max_len=self.cfg.max_seq_len)

    def units(self, trainable: list[Sample]) -> dict[str, int]:
        """Trained tokens (within max_seq_len) of each rollout, over all its branches."""
        out: dict[str, int] = {}
        for s in trainable:
            out[s.rollout_id] = out.get(s.rollout_id, 0) + sum(s.mask[1: self.cfg.max_seq_len])
        return out

    def backward(self, samples: list[Sample], norm: Normaliser, units: dict[str, int] | None = None,
                 value_turns: int = 1) -> dict[str, Any]:
        """Forward and backward over `samples` in micro-batches (gradients accumulate); the statistics' sums.
        With a value head, its clipped loss over the samples' turns (divided by the step's `value_turns`)
        is added; it reaches only the head (the hidden states are detached)."""
        cfg = self.cfg
        units = units if units is not None else self.units(samples)
        out: dict[str, Any] = {"loss": 0.0, "tokens": 0, "gap_sum": 0.0, "gap_n": 0, "gap_max": -math.inf,
                               "ratio_sum": 0.0, "ratio_n": 0, "ratio_min": math.inf, "ratio_max": -math.inf,
                               "clipped": 0, "extra": {}, "extra_n": 0, "entropy_sum": 0.0,
                               "value_loss": 0.0, "value_clipped": 0, "value_n": 0}
        for i in range(0, len(samples), cfg.micro_batch_size):
            chunk = samples[i: i + cfg.micro_batch_size]
            b = self.pack(chunk, units=units)
            start = first_trained_position(b.mask)
            ids, attn = b.input_ids.to(self.device), b.attention_mask.to(self.device)
            mask, eng = b.mask[:, start:].to(self.device), b.engine_logps[:, start:].to(self.device)
            adv = b.advantages.to(self.device)
            if adv.dim() == 2:
                adv = adv[:, start:]
            entropy: list[float] = []
            hidden: list[torch.Tensor] | None = [] if self.value_head is not None else None
            logps = token_logps(self.model, ids, attn, b.temperature, start=start, entropy=entropy, entropy_mask=mask,
                                hidden=hidden)
            frozen = [f for s in chunk if (f := self.old_logps.get((s.rollout_id, s.branch))) is not None]
            if len(frozen) == len(chunk):  # pi_old of the phase (see freeze_old_logps)
                old = self.pack(chunk, logprobs=frozen).engine_logps[:, start:].to(self.device)
            else:  # not frozen (a step outside a phase): pi_old is the policy now, ratio 1
                old = logps.detach()
            ref = self._ref_logps(ids, attn, start, b.temperature) if cfg.beta != 0.0 else None
            is_ratio, is_stats = (engine_is_ratio(old, eng, mask, cfg) if cfg.is_mode != "none" else (None, None))
            loss, stats = policy_loss(logps, old, ref, is_ratio, mask, adv, cfg, norm, b.units)
            vloss = self._value_backward(chunk, hidden[0], start, value_turns, out) if hidden else None
            (loss if vloss is None else loss + vloss).backward()
            out["loss"] += float(loss.detach())
            out["tokens"] += int(attn.sum())
            out["entropy_sum"] += entropy[0]
            gap = (old - eng).abs()[mask > 0]
            if gap.numel():
                out["gap_sum"] += float(gap.sum())
                out["gap_n"] += gap.numel()
                out["gap_max"] = max(out["gap_max"], float(gap.max()))
            if is_stats is not None:
                w = is_stats["weight_mask"] > 0
                raw, clipped = is_stats["raw"][w], is_stats["clipped"][w]
                if raw.numel():
                    out["ratio_sum"] += float(raw.sum())
                    out["ratio_n"] += raw.numel()
                    out["ratio_min"] = min(out["ratio_min"], float(raw.min()))
                    out["ratio_max"] = max(out["ratio_max"], float(raw.max()))
                    out["clipped"] += int(clipped.sum())
            n = int(mask.sum())
            for key, value in stats.items():
                out["extra"][key] = out["extra"].get(key, 0.0) + value * n
            out["extra_n"] += n
        return out

    def _ref_logps(self, ids: torch.Tensor, attn: torch.Tensor, start: int,
                   t: float | torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return token_logps(self.ref_model, ids, attn, t, start=start)
            with self.model.disable_adapter():
                return token_logps(self.model, ids, attn, t, start=start)

    # --- checkpoints ------------------------------------------------------------------------------
    def save(self, dest: Path) -> str:
        """Write the engine-loadable weights and the optimizer state to `dest`; returns the kind. A full disk
        is `DiskFull`, and the half-written folder is removed: it is no checkpoint, and it holds space."""
        try:
            return self._save(dest)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            shutil.rmtree(dest, ignore_errors=True)
            free = shutil.disk_usage(dest.parent).free / 2**20
            raise DiskFull(f"cannot write the checkpoint {dest}: the disk is full ({free:.0f} MiB free there)",
                           "free space on that disk (old checkpoints, logs/); the previous weights serve "
                           "meanwhile, and `appliance run` continues the run") from e

    def _save(self, dest: Path) -> str:
        dest.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(dest, safe_serialization=True)
        if self.kind == "full":
            self.tokenizer.save_pretrained(dest)
        (dest / OPTIMIZER_FILE).parent.mkdir(exist_ok=True)
        torch.save(self.optimizer.state_dict(), dest / OPTIMIZER_FILE)
        if self.value_head is not None:  # beside the optimizer state, out of what the engine loads
            torch.save({"head": self.value_head.state_dict(), "optimizer": self.value_optimizer.state_dict()},
                       dest / VALUE_HEAD_FILE)
        return self.kind

    def trainable_state(self) -> dict[str, Any]:
        """A detached copy of the trained parameters (the LoRA weights, or every weight)."""
        return {n: p.detach().clone().cpu() for n, p in self.model.named_parameters() if p.requires_grad}


def _combine(partials: list[dict[str, Any]]) -> dict[str, Any]:
    """The step's statistics from every rank's sums: sums add, minima and maxima combine."""
    out = dict(partials[0])
    out["extra"] = dict(out["extra"])
    for p in partials[1:]:
        for key in ("loss", "tokens", "gap_sum", "gap_n", "ratio_sum", "ratio_n", "clipped", "extra_n", "entropy_sum",
                    "value_loss", "value_clipped", "value_n"):
            out[key] += p[key]
        out["gap_max"] = max(out["gap_max"], p["gap_max"])
        out["ratio_max"] = max(out["ratio_max"], p["ratio_max"])
        out["ratio_min"] = min(out["ratio_min"], p["ratio_min"])
        for key, value in p["extra"].items():
            out["extra"][key] = out["extra"].get(key, 0.0) + value
    return out


def _has_advantage(s: Sample) -> bool:
    return any(s.token_advantages) if s.token_advantages is not None else bool(s.advantage)


