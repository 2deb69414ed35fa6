"""SFT on the policy's own successful trajectories (rejection sampling), with TRL's SFTTrainer.

The samples are already tokenized (the exact ids the engine saw and sampled), so they go to SFTTrainer as a
pre-tokenized dataset: `input_ids` plus `assistant_masks` = our provenance mask. TRL turns the mask into
labels (-100 wherever the mask is 0), so the loss falls on model-sampled tokens only, never on the prompt,
tool output or environment text. SmolLM2's chat template has no `{% generation %}` markers, which is why
TRL's own `assistant_only_loss` cannot be used: our mask is more exact anyway (it comes from the engine).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from appliance.schemas import Outcome, Rollout, Sample


def successful_samples(rollouts: list[Rollout], samples: list[Sample]) -> list[Sample]:
    """The samples of rollouts that succeeded (rejection sampling keeps nothing else)."""
    ok = {r.id for r in rollouts if r.outcome == Outcome.SUCCESS}
    return [s for s in samples if s.rollout_id in ok and any(s.mask)]


def build_sft_trainer(policy: Any, samples: list[Sample], output_dir: Path) -> Any:
    """A TRL SFTTrainer over `policy`'s model (a `PolicyTrainer`); its optimizer is SFT's own."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    cfg = policy.cfg
    data = Dataset.from_dict({
        "input_ids": [s.token_ids[: cfg.max_seq_len] for s in samples],
        "assistant_masks": [s.mask[: cfg.max_seq_len] for s in samples],
    })
    args = SFTConfig(
        output_dir=str(output_dir), num_train_epochs=cfg.sft_epochs, learning_rate=cfg.sft_learning_rate,
        per_device_train_batch_size=cfg.micro_batch_size, max_length=cfg.max_seq_len,
        max_grad_norm=cfg.max_grad_norm, weight_decay=cfg.weight_decay, seed=cfg.seed,
        save_strategy="no", report_to=[], logging_steps=1, disable_tqdm=True,
        use_cpu=policy.device.type == "cpu", bf16=cfg.dtype == "bfloat16" and torch.cuda.is_available(),
        gradient_checkpointing=cfg.gradient_checkpointing, dataloader_pin_memory=False,
    )
    return SFTTrainer(model=policy.model, args=args, train_dataset=data, processing_class=policy.tokenizer)


def sft(policy: Any, samples: list[Sample]) -> dict[str, float]:
    """Train `policy` in place on `samples`; returns loss, steps and trained tokens."""
    if not samples:
        return {"sft_loss": 0.0, "sft_steps": 0, "sft_tokens": 0}
    with tempfile.TemporaryDirectory(prefix="appliance-sft-") as tmp:
        trainer = build_sft_trainer(policy, samples, Path(tmp))
        result = trainer.train()
    return {"sft_loss": float(result.training_loss), "sft_steps": int(result.global_step),
            "sft_tokens": sum(sum(s.mask[1: policy.cfg.max_seq_len]) for s in samples)}
