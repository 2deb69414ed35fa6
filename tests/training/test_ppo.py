"""PPO with a value head on the tiny model (issue 18): the step and its metrics, the value head kept out of
the served weights and the export, resumed from the checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from appliance.config import TrainingSettings
from appliance.testing import FakeEngine
from appliance.training import export
from appliance.training.advantages import build_groups
from appliance.training.learn import learn, run_steps, split_groups
from appliance.training.loss import first_trained_position, token_logps
from appliance.training.trainer import VALUE_HEAD_FILE, PolicyTrainer
from practice_data import practice  # tests/training/practice_data.py


def cfg(**kw) -> TrainingSettings:
    return TrainingSettings(**{"method": "ppo", "learning_rate": 1e-2, "micro_batch_size": 2, **kw})


def phase(trainer: PolicyTrainer, groups: dict[str, list[float | None]], steps: int = 1) -> list[dict[str, float]]:
    rollouts, samples = practice(groups)
    out: list[dict[str, float]] = []
    run_steps(trainer, [], split_groups(build_groups(rollouts, samples), steps), out.append)
    return out


def safetensors_keys(folder) -> set[str]:
    keys: set[str] = set()
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            keys |= set(st.keys())
    return keys


@pytest.mark.slow
def test_a_ppo_phase_trains_policy_and_critic_and_reports_the_critics_metrics(tiny_model):
    trainer = PolicyTrainer(cfg(), tiny_model)
    assert trainer.value_head is not None and not trainer.value_head.weight.any()  # a fresh critic: V = 0
    before = trainer.trainable_state()
    steps = phase(trainer, {"a": [1.0, 0.0, 0.0, 1.0], "b": [0.0, 0.0]}, steps=2)
    assert all(n.startswith("base_model") for n in before)  # the head is not among the policy's weights
    first, second = steps
    assert first["trained_tokens"] > 0 and first["value_loss"] > 0
    for key in ("explained_variance", "value_clip_frac", "clip_ratio", "adv_turn_0", "adv_turn_1", "returns_mean"):
        assert key in first, key
    assert first["values_mean"] == 0.0  # V_old of the phase: the fresh head's
    assert trainer.value_head.weight.abs().sum() > 0  # the critic learned
    after = trainer.trainable_state()
    assert any(not torch.equal(before[n], after[n]) for n in before)
    # group b scored 0, 0 and the fresh critic says 0: returns equal values, no advantage, no step
    assert second["skipped_steps"] == 1.0 and second["trained_tokens"] == 0


@pytest.mark.slow
def test_the_values_read_in_a_training_forward_are_the_frozen_ones(tiny_model):
    """The training forward keeps only positions from the first trained token on; the head must read the
    same states there as in the phase's full forward (else V and V_old would be different turns)."""
    trainer = PolicyTrainer(cfg(), tiny_model)
    with torch.no_grad():
        trainer.value_head.weight.normal_()
    _, samples = practice({"a": [1.0, 0.0]})
    frozen: dict = {}
    trainer.logps(samples, values=frozen)
    b = trainer.pack(samples)
    start = first_trained_position(b.mask)
    hidden: list = []
    with torch.no_grad():
        token_logps(trainer.model, b.input_ids, b.attention_mask, b.temperatures, start=start, hidden=hidden)
        tids, values = trainer._turn_values(samples, hidden[0], start)
    assert start > 0 and len(tids) == 4 and set(tids) == set(frozen)
    assert values.tolist() == pytest.approx([frozen[t] for t in tids], abs=1e-5)
    assert len(set(round(v, 4) for v in values.tolist())) == 4  # four different states, four values


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True])
def test_the_value_head_is_not_in_the_served_or_exported_weights(tiny_model, tmp_path, full):
    trainer = PolicyTrainer(cfg(full_finetune=full), tiny_model)
    phase(trainer, {"a": [1.0, 0.0]})
    dest = tmp_path / "v1"
    trainer.save(dest)
    assert (dest / VALUE_HEAD_FILE).exists()
    served = safetensors_keys(dest)
    assert served and not any("value" in k or "score" in k for k in served)
    if full:  # exactly the base model's tensors: what vLLM's reload_weights reads
        assert served == safetensors_keys(tiny_model)
    else:
        assert all("lora_" in k for k in served)
        assert json.loads((dest / "adapter_config.json").read_text())["modules_to_save"] in (None, [])
    out = tmp_path / "export"
    out.mkdir()
    export._copy_tree(dest, out)  # what `appliance export` copies of a checkpoint folder
    assert not (out / "trainer").exists() and not list(out.rglob("value_head*"))


@pytest.mark.slow
def test_resume_loads_the_value_head_and_its_optimizer(tiny_model, tmp_path):
    trainer = PolicyTrainer(cfg(), tiny_model)
    phase(trainer, {"a": [1.0, 0.0, 1.0, 0.0]})
    trainer.save(tmp_path / "v1")
    head = {k: v.clone() for k, v in trainer.value_head.state_dict().items()}
    assert head["weight"].abs().sum() > 0
    resumed = PolicyTrainer(cfg(), tiny_model, resume_from=tmp_path / "v1", resume_kind="lora")
    assert all(torch.equal(head[k], v) for k, v in resumed.value_head.state_dict().items())
    assert resumed.value_optimizer.state_dict()["state"]  # AdamW's moments came back too
    # the resumed critic's values are the saved critic's
    _, samples = practice({"z": [1.0]}, seed=3)
    v1: dict = {}
    v2: dict = {}
    trainer.logps(samples, values=v1)
    resumed.logps(samples, values=v2)
    assert v1 and v1 == pytest.approx(v2)
    # a GRPO trainer resumed from a PPO checkpoint has no critic and ignores the file
    assert PolicyTrainer(cfg(method="grpo"), tiny_model, resume_from=tmp_path / "v1",
                         resume_kind="lora").value_head is None


@pytest.mark.slow
def test_grpo_with_turn_credit_trains_a_critic_and_keeps_the_group_advantage(tiny_model):
    trainer = PolicyTrainer(cfg(method="grpo", turn_credit=0.5), tiny_model)
    [step] = phase(trainer, {"a": [1.0, 0.0]})
    assert step["trained_tokens"] == 2 * 10 and "value_loss" in step and "adv_turn_1" in step


@pytest.mark.slow
def test_learn_with_ppo_records_the_critics_metrics_per_step(store, settings, tiny_model):
    settings.engine.model = tiny_model
    settings.training.method = "ppo"
    settings.training.learning_rate = 1e-2
    engine = FakeEngine()
    result = learn(store, settings, engine, *practice({"a": [1.0, 0.0], "b": [0.0, 0.0]}), run_id="run",
                   iteration=0, steps=2)
    assert engine.calls == ["pause", "sync"] and result.checkpoint is not None
    assert (settings.checkpoints_dir / "v1" / VALUE_HEAD_FILE).exists()
    for name in ("value_loss", "explained_variance", "value_clip_frac", "clip_ratio", "adv_turn_0"):
        assert store.metric_series("run", name), name
