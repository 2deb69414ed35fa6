"""The training section of the settings tree: how LEARN trains (method, loss, LoRA or full, learning rates,
micro-batches, processes, demonstrations), and the learning rates of each training mode."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from appliance.config.section import Section

# The learning rates of a training mode where the settings name none (the gpu profile: it serves whichever mode
# the user picks). A LoRA adapter's optimum sits ~10x a full fine-tune's (Schulman et al., "LoRA Without
# Regret", 2025; TRL's guide to it trains SFT LoRA at 2e-4 against 2e-5 in full, GRPO LoRA at 1e-5..5e-5 with
# alpha 32, as ours): the full fine-tune's 1e-5 / 2e-5 on an adapter barely moves it. The cpu profile sets its
# own, measured on the bundled model.
LEARNING_RATES: dict[str, dict[str, float]] = {
    "lora": {"rl": 5e-5, "sft": 2e-4},
    "full": {"rl": 1e-5, "sft": 2e-5},
}


class TrainingSettings(Section):
    method: Literal["grpo", "sft", "both", "ppo"] = Field(
        "grpo", description="Learning method: GRPO-family RL, SFT on successful trajectories, both (SFT first), or "
        "ppo: the clipped objective with a critic (a value head on the policy) and GAE over the group's call tree, "
        "one value per assistant turn (docs/DESIGN.md, \"Turn-level credit\").")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "gspo"] = Field(
        "dapo",
        description="Policy loss, as TRL names them: grpo (per-sequence token mean), dapo (token mean over the batch), "
        "dr_grpo (fixed-length normaliser, no std scaling), gspo (sequence-level importance ratio; GSPO wants "
        "epsilon ~3e-4 and epsilon_high ~4e-4).")
    full_finetune: bool = Field(False, description="Train all weights instead of a LoRA adapter.")
    lora_rank: int = Field(16, ge=1, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (the update is scaled by alpha / r).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    lora_targets: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="Module names LoRA adapts (vLLM's LoRA loader supports the attention and MLP projections).")
    learning_rate: float | None = Field(
        None, gt=0, description="AdamW learning rate of the RL steps; None = by training mode (LEARNING_RATES): "
        "5e-5 for a LoRA adapter, 1e-5 for a full fine-tune (a LoRA adapter wants ~10x a full fine-tune's).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient norm clip per optimizer step.")
    micro_batch_size: int = Field(4, ge=1, description="Sequences per forward pass; gradients accumulate over a step.")
    epsilon: float = Field(0.2, ge=0, description="PPO clip range below 1 (and above, unless epsilon_high is set).")
    epsilon_high: float | None = Field(None, ge=0, description="Upper clip range (DAPO's clip-higher uses 0.28).")
    beta: float = Field(0.0, ge=0, description="KL penalty weight against the reference policy; 0 skips its pass.")
    scale_rewards: bool = Field(
        True, description="Divide group advantages by the group's reward std (always off for dr_grpo: its point).")
    min_valid_rollouts: int = Field(
        2, ge=1, description="Valid (non infra-error) rollouts a group needs to be trained on; smaller ones drop.")
    is_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = Field(
        "token_truncate",
        description="Importance-sampling correction against the engine's recorded logprobs (TRL's vLLM modes): "
        "truncate caps the ratio, mask zeroes tokens whose ratio leaves [is_min, is_cap]; none disables it.",
    )
    is_cap: float = Field(3.0, gt=0, description="Upper bound of the engine/trainer importance ratio (TRL uses 3.0).")
    is_min: float | None = Field(None, ge=0, description="Lower bound of the importance ratio in the mask modes.")
    max_seq_len: int = Field(4096, ge=16, description="Longest training sequence; longer samples are cut at the end.")
    sft_epochs: float = Field(1.0, gt=0, description="Epochs of SFT over the successful trajectories of an iteration.")
    sft_learning_rate: float | None = Field(
        None, gt=0, description="SFT learning rate; None = by training mode (LEARNING_RATES): 2e-4 for a LoRA "
        "adapter, 2e-5 for a full fine-tune.")
    gae_gamma: float = Field(
        1.0, ge=0, le=1, description="PPO discount per assistant turn (1: the outcome reward is not discounted; "
        "see appliance/training/credit.py for why).")
    gae_lambda: float = Field(
        0.95, ge=0, le=1, description="PPO GAE lambda over turns: 1 = the outcome alone against the critic's "
        "baseline, lower leans on the critic's turn-to-turn differences.")
    value_clip: float = Field(
        0.2, ge=0, description="PPO value clipping: a turn's new value stays within this of its value at the start "
        "of the phase (rewards are in [0, 1]).")
    value_learning_rate: float = Field(1e-3, gt=0, description="AdamW learning rate of the value head.")
    turn_credit: float = Field(
        0.0, ge=0, description="GRPO turn-level credit: add this x the critic's per-turn TD term (centred over the "
        "rollout's turns) to the group-normalised outcome; > 0 trains a value head as ppo does. 0 = off.")
    sft_batch_size: int = Field(
        4, ge=1, description="Samples per SFT optimizer step (drawn by length; a forward pass runs their shared "
        "prompt once and holds at most micro_batch_size x max_seq_len tokens).")
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Trainer weights dtype; float32 on the CPU keeps the engine/trainer logprob gap ~0.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward (less memory, ~30% "
                                         "slower).")
    seed: int = Field(0, description="Seed for LoRA initialisation and data order.")
    processes: int = Field(
        1, ge=0,
        description="Trainer processes of a LEARN phase: 1 trains in the appliance's process; N > 1 launches N "
        "data-parallel workers through accelerate (one per GPU over NCCL, or gloo on the CPU), each step's whole "
        "groups sharded over them and gradients summed; 0 = one per visible GPU (1 without a GPU).",
    )
    sft_on_successes: bool = Field(
        True, description="SFT on the policy's own successes: with method sft or both, the iteration's successful "
        "rollouts; and the successes kept in the demonstration pool (hindsight relabels of hinted tasks, the other "
        "wins) that later phases mix in. Off: SFT trains on reference demonstrations alone (`scripts/bench learning "
        "--arms`'s ablation of this learner).")
    demonstrations: bool = Field(
        True, description="Teacher-free demonstrations: each valid task's reference solution, run through the built-in "
        "harness's formatting and verified, becomes an SFT sample (never an RL sample).")
    demo_warmstart_levels: list[int] = Field(
        [2, 3, 4], description="Levels of the demonstrations the first LEARN phase trains on (SFT) before any RL.")
    demo_warmstart_tasks: int = Field(
        8, ge=0, description="Warm-start demonstration tasks per family and level (0 = no warm-start); 8 x 3 levels "
        "x the families is about the 288 demonstrations that moved independent shell chores from 0/96 to 7/96.")
    demo_warmstart_epochs: float = Field(2.0, gt=0, description="SFT epochs of the warm-start LEARN phase.")
    demo_mix_ratio: float = Field(
        1.0, ge=0, description="Demonstrations mixed into each later LEARN phase's SFT, per RL sample of the phase "
        "(0 = none); picked from the kept pool, weighted toward each family's frontier level.")
    demo_mix_min: int = Field(8, ge=0, description="Fewest demonstrations mixed into a later LEARN phase (when the "
                              "pool has them), so an iteration without successes still learns.")
    demo_shapes: list[Literal["solve", "look", "check", "recover", "fix"]] = Field(
        ["solve", "look", "check", "recover", "fix"], min_length=1,
        description="Episode shapes of reference demonstrations, one per task (a hash of its id picks it): 'solve' "
        "= the solution then DONE; 'look' = ls first; 'check' = a look at the result before DONE; 'recover' = a "
        "misspelled first command (exit 127) and then the solution; 'fix' = the output printed instead of written "
        "to the named file, a look at that file (missing), then the solution. The optional look, the idle check "
        "and the slips are context, masked out of the loss; a look the solution needs (a file the request does "
        "not name) and a check that finds a real mistake are trained, whatever the shape. ['solve'] alone "
        "teaches 'one command, then DONE' whatever the command printed (see appliance/episode_shapes.py).")

    @property
    def rl_lr(self) -> float:
        """The RL steps' learning rate: learning_rate, or the training mode's (read now, not at load)."""
        return self.learning_rate or LEARNING_RATES[self.mode]["rl"]

    @property
    def sft_lr(self) -> float:
        """The SFT steps' learning rate: sft_learning_rate, or the training mode's."""
        return self.sft_learning_rate or LEARNING_RATES[self.mode]["sft"]

    @property
    def mode(self) -> Literal["lora", "full"]:
        return "full" if self.full_finetune else "lora"
