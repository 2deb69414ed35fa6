"""The critic: a value head on the policy's detached last hidden state, and the turn-level credit taken with it.

The value head (`training.method = "ppo"`, or GRPO with `turn_credit`): one linear layer from the policy's
last hidden state, detached, to V(state), read at each assistant turn's first token. Why a head on detached
features and not a separate critic, nor a head whose loss reaches the adapter: a second 135M model with its
own AdamW state would add about 2.2 GB and a forward and backward per sample to a 2-core, 24 GB machine
(more time-sliced with serving on a GPU), for a few hundred value targets a phase; a head sharing the trunk's
gradients would let the value
loss move the LoRA adapter the engine serves. Detached, the head costs hidden_size + 1 parameters, no extra
forward pass, and leaves the policy update exactly the PPO one. It lives beside the optimizer state
(`trainer/value_head.pt`, with its own AdamW), so the engine's weights, the weight sync and `appliance
export` never see it, and a resumed phase picks it up.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from appliance.schemas import Sample
from appliance.training.advantages import GroupedBatch
from appliance.training.credit import TurnId, centred_per_rollout, runs, tree_credit, with_credit
from appliance.training.distributed import broadcast_params
from appliance.training.loss import value_loss

VALUE_HEAD_FILE = "trainer/value_head.pt"  # the critic: never part of the served weights
ADV_TURNS = 8  # advantage-by-turn metrics for turns 0..7; later turns are pooled into the last


class Critic:
    """The value-head half of `PolicyTrainer` (it supplies model, device, cfg, world and the phase's maps)."""

    cfg: Any
    model: Any
    device: torch.device
    world: int
    value_head: torch.nn.Linear | None
    value_optimizer: torch.optim.Optimizer
    old_values: dict[TurnId, float]
    returns: dict[TurnId, float]
    depth: dict[TurnId, int]

    def _build_value_head(self, resume_from: Path | None) -> None:
        # zero-initialised: a fresh critic says V = 0 everywhere, so the first phase's credit is the outcome's
        head = torch.nn.Linear(int(self.model.config.hidden_size), 1)
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
        self.value_head = head.to(self.device, torch.float32)
        if self.world > 1:
            broadcast_params(list(self.value_head.parameters()))
        self.value_optimizer = torch.optim.AdamW(self.value_head.parameters(), lr=self.cfg.value_learning_rate)
        if resume_from is not None and (resume_from / VALUE_HEAD_FILE).exists():
            saved = torch.load(resume_from / VALUE_HEAD_FILE, map_location=self.device)
            self.value_head.load_state_dict(saved["head"])
            self.value_optimizer.load_state_dict(saved["optimizer"])

    def _turn_values(self, chunk: list[Sample], hidden: torch.Tensor,
                     start: int) -> tuple[list[TurnId], torch.Tensor]:
        """V(state) of every trained turn of `chunk` within the packed length: the head on the final hidden
        state of the turn's last context token (the one that predicts the turn's first token). `hidden`
        holds positions start.. (what `token_logps` kept)."""
        assert self.value_head is not None
        tids, rows, cols = [], [], []
        for j, s in enumerate(chunk):
            for a, _ in runs(s.mask):
                if start <= a - 1 and a < start + hidden.shape[1]:
                    tids.append((s.rollout_id, s.branch, a))
                    rows.append(j)
                    cols.append(a - 1 - start)
        if not tids:
            return [], torch.zeros(0, device=hidden.device)
        return tids, self.value_head(hidden[rows, cols].float()).squeeze(-1)

    def assign_credit(self, parts: list[GroupedBatch]) -> list[GroupedBatch]:
        """The phase's parts with turn-level credit (after `freeze_old_logps`); unchanged without a value head.

        ppo: GAE over each group's call tree, a shared turn trained once (see `appliance.training.credit`),
        the advantages divided by the step's std over its trained turns when scale_rewards. GRPO with
        turn_credit: the group advantage plus turn_credit x the TD term centred over the rollout's turns.
        Either way the value head learns the lambda-returns."""
        if self.value_head is None:
            return parts
        cfg, out = self.cfg, []
        for part in parts:
            rewards = part.rewards
            credit = tree_credit(part.samples, self.old_values, rewards, gamma=cfg.gae_gamma, lam=cfg.gae_lambda,
                                 fork_baseline=cfg.method == "ppo")
            if cfg.method == "ppo":
                scale = 1.0
                if cfg.scale_rewards and cfg.loss_type != "dr_grpo":
                    trained = [a for t, a in credit.advantage.items() if credit.trained[t]]
                    scale = 1.0 / (_std(trained) + 1e-4) if len(trained) > 1 and _std(trained) > 0 else 1.0
                samples = with_credit(part.samples, credit, dedup=True, turn_coef=scale)
            else:
                td = centred_per_rollout(tree_credit(part.samples, self.old_values, rewards, gamma=cfg.gae_gamma,
                                                     lam=0.0, fork_baseline=False))
                samples = with_credit(part.samples, td, dedup=False, outcome_coef=1.0, turn_coef=cfg.turn_credit)
            self.returns.update(credit.ret)
            self.depth.update(credit.depth)
            out.append(GroupedBatch(samples, part.valid_groups, part.dropped_groups, part.zero_std_groups,
                                    part.rollouts, part.valid_rollouts, part.infra_errors, part.rewards,
                                    part.signal_groups, part.turns))
        return out

    def _value_turns(self, trainable: list[Sample]) -> list[TurnId]:
        """The turns whose value the step trains (the phase's credit gave them a return)."""
        if self.value_head is None:
            return []
        return [t for s in trainable for a, _ in runs(s.mask[: self.cfg.max_seq_len])
                if (t := (s.rollout_id, s.branch, a)) in self.returns]

    def _value_metrics(self, trainable: list[Sample], turns: list[TurnId], partial: dict[str, Any]) -> dict[str, float]:
        """Value loss and clip fraction (from the step's forward), the explained variance of the returns by the
        phase's V_old, and the mean advantage by turn index (`adv_turn_K`, K >= ADV_TURNS-1 pooled)."""
        out: dict[str, float] = {}
        n = max(partial["value_n"], 1)
        out.update(value_loss=partial["value_loss"] / n, value_clip_frac=partial["value_clipped"] / n)
        rets = [self.returns[t] for t in turns]
        olds = [self.old_values.get(t, 0.0) for t in turns]
        if len(rets) > 1:
            var = _var(rets)
            out["explained_variance"] = 1.0 - _var([r - v for r, v in zip(rets, olds, strict=True)]) / var \
                if var else 0.0
            out.update(returns_mean=sum(rets) / len(rets), values_mean=sum(olds) / len(olds))
        by_turn: dict[int, list[float]] = {}
        for s in trainable:
            for a, _ in runs(s.mask[: self.cfg.max_seq_len]):
                depth = self.depth.get((s.rollout_id, s.branch, a))
                if depth is not None and s.token_advantages is not None:
                    by_turn.setdefault(min(depth, ADV_TURNS - 1), []).append(s.token_advantages[a])
        for depth, advs in sorted(by_turn.items()):
            out[f"adv_turn_{depth}"] = sum(advs) / len(advs)
        return out

    def _value_backward(self, chunk: list[Sample], hidden: torch.Tensor, start: int, value_turns: int,
                        out: dict[str, Any]) -> torch.Tensor | None:
        tids, values = self._turn_values(chunk, hidden, start)
        keep = [i for i, t in enumerate(tids) if t in self.returns]
        if not keep:
            return None
        dev = values.device
        values = values[keep]
        old = torch.tensor([self.old_values.get(tids[i], 0.0) for i in keep], device=dev)
        ret = torch.tensor([self.returns[tids[i]] for i in keep], device=dev)
        loss, clipped = value_loss(values, old, ret, self.cfg.value_clip)
        out["value_loss"] += float(loss.detach())
        out["value_clipped"] += int(clipped.sum())
        out["value_n"] += len(keep)
        return loss / value_turns


def _var(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / len(xs)


def _std(xs: list[float]) -> float:
    return math.sqrt(_var(xs))
