"""The policy trainer on a tiny random llama on the CPU: a GRPO step, the logprob gap, checkpoints, resume."""

from __future__ import annotations

import json
import random

import pytest
import torch

from appliance.config import TrainingSettings
from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample
from appliance.training.advantages import build_groups
from appliance.training.trainer import PolicyTrainer, TrainingError

# two assistant turns with a tool result between them: the mask has two runs of 1s
MASK = [0] * 12 + [1] * 8 + [0] * 6 + [1] * 6


def group(trainer: PolicyTrainer, rewards: list[float | None], *, seed: int = 0, engine_noise: float = 0.0):
    """Rollouts of one group (None = infra error) and samples whose engine logprobs are the trainer's own."""
    rng = random.Random(seed)
    rollouts, samples = [], []
    for i, r in enumerate(rewards):
        outcome = Outcome.INFRA_ERROR if r is None else (Outcome.SUCCESS if r > 0 else Outcome.FAILURE)
        rollouts.append(Rollout(f"r{i}", "run", "t", "g", 0, "builtin", 0, RolloutStatus.FINISHED,
                                outcome=outcome, reward=r or 0.0))
        samples.append(Sample(f"r{i}", "g", 0, [rng.randrange(2, 2000) for _ in MASK], list(MASK),
                              [0.0] * len(MASK), 0))
    for s, lp in zip(samples, trainer.logps(samples), strict=True):
        s.logprobs = [(v + engine_noise) if m else 0.0 for v, m in zip(lp, s.mask, strict=True)]
    return rollouts, samples


def cfg(**kw) -> TrainingSettings:
    return TrainingSettings(learning_rate=1e-2, micro_batch_size=2, **kw)


@pytest.mark.slow
def test_one_grpo_step_changes_the_lora_weights_only(tiny_model):
    trainer = PolicyTrainer(cfg(), tiny_model)
    before = trainer.trainable_state()
    assert before and all("lora_" in name for name in before)
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    metrics = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0, 1.0, 0.0])))
    after = trainer.trainable_state()
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(p, frozen[n]) for n, p in trainer.model.named_parameters() if not p.requires_grad)
    assert metrics["valid_groups"] == 1 and metrics["trained_tokens"] == 4 * 14
    assert metrics["tokens_per_s"] > 0 and metrics["grad_norm"] > 0


@pytest.mark.slow
def test_engine_logprobs_equal_to_the_trainers_give_a_zero_gap(tiny_model):
    trainer = PolicyTrainer(cfg(), tiny_model)
    metrics = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0, 0.0, 1.0])))
    assert metrics["logprob_gap_mean"] < 1e-5 and metrics["logprob_gap_max"] < 1e-4
    assert metrics["is_ratio_mean"] == pytest.approx(1.0, abs=1e-4) and metrics["is_clipped_frac"] == 0.0


@pytest.mark.slow
def test_a_lagging_engine_shows_up_in_the_gap_and_is_ratio(tiny_model):
    trainer = PolicyTrainer(cfg(is_mode="token_truncate", is_cap=1.5), tiny_model)
    # the engine saw every sampled token as 0.5 nats more likely than the trainer does: ratio e^-0.5
    metrics = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0], engine_noise=0.5)))
    assert metrics["logprob_gap_mean"] == pytest.approx(0.5, abs=1e-3)
    assert metrics["is_ratio_max"] == pytest.approx(torch.exp(torch.tensor(-0.5)).item(), abs=1e-3)
    noisy = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0], engine_noise=-1.0)))
    assert noisy["is_clipped_frac"] == 1.0  # e^1 > 1.5 everywhere: every token truncated


@pytest.mark.slow
def test_infra_errors_are_not_trained_on(tiny_model):
    trainer = PolicyTrainer(cfg(), tiny_model)
    metrics = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0, None, None])))
    assert metrics["samples"] == 2 and metrics["trained_tokens"] == 2 * 14
    assert metrics["infra_error_rate"] == 0.5
    dropped = trainer.grpo_step(build_groups(*group(trainer, [None, None, None])))
    assert dropped["dropped_groups"] == 1 and dropped["trained_tokens"] == 0 and dropped["loss"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "gspo"])
def test_every_loss_type_steps_with_kl(tiny_model, loss_type):
    trainer = PolicyTrainer(cfg(loss_type=loss_type, beta=0.05), tiny_model)
    metrics = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0])))
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # a fresh adapter is the reference
    second = trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0], seed=1)))
    assert second["kl"] > 0


@pytest.mark.slow
def test_lora_checkpoint_is_an_adapter_folder_and_resumes(tiny_model, tmp_path):
    trainer = PolicyTrainer(cfg(), tiny_model)
    trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0])))
    assert trainer.save(tmp_path / "v1") == "lora"
    assert json.loads((tmp_path / "v1" / "adapter_config.json").read_text())["r"] == 16
    assert (tmp_path / "v1" / "adapter_model.safetensors").exists()
    resumed = PolicyTrainer(cfg(), tiny_model, resume_from=tmp_path / "v1", resume_kind="lora")
    assert all(torch.equal(a, resumed.trainable_state()[n]) for n, a in trainer.trainable_state().items())
    assert resumed.optimizer.state_dict()["state"]  # Adam moments came back too
    with pytest.raises(TrainingError, match="full_finetune"):
        PolicyTrainer(cfg(full_finetune=True), tiny_model, resume_from=tmp_path / "v1", resume_kind="lora")


@pytest.mark.slow
def test_full_finetune_saves_a_safetensors_model_folder(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = PolicyTrainer(cfg(full_finetune=True), tiny_model)
    trainer.grpo_step(build_groups(*group(trainer, [1.0, 0.0])))
    assert trainer.save(tmp_path / "v1") == "full"
    assert (tmp_path / "v1" / "model.safetensors").exists() and (tmp_path / "v1" / "tokenizer.json").exists()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "v1")
    name, trained = next(iter(trainer.trainable_state().items()))
    assert torch.equal(dict(reloaded.named_parameters())[name], trained)


def test_lora_targets_find_a_fused_projection_and_refuse_a_name_the_model_lacks(tmp_path) -> None:
    """Before: peft adapted whatever subset of the list a Phi 3 model has (o_proj, down_proj) and said nothing:
    its attention's qkv_proj and the MLP's gate_up_proj were never trained."""
    from transformers import Phi3Config, Phi3ForCausalLM

    from appliance.config import TrainingSettings
    from appliance.errors import TrainingError
    from appliance.training.trainer import lora_targets

    phi = Phi3ForCausalLM(Phi3Config(vocab_size=64, pad_token_id=0, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    assert sorted(lora_targets(phi, TrainingSettings().lora_targets)) == ["down_proj", "gate_up_proj", "o_proj",
                                                                         "qkv_proj"]
    with pytest.raises(TrainingError, match="no w_gate module") as e:
        lora_targets(phi, ["o_proj", "w_gate"])
    assert "qkv_proj" in e.value.message
