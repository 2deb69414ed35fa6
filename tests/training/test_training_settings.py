"""The training settings a GPU run resolves: learning rates by training mode, and a LoRA rank the engine takes."""

from __future__ import annotations

import pytest

from appliance.config import TrainingSettings, load_settings
from appliance.errors import ConfigError


def _gpu(**env: str):
    return load_settings(environ={"APPLIANCE_PROFILE": "gpu", "APPLIANCE_HOME": "/nonexistent", **env})


def test_the_gpu_profile_picks_its_learning_rates_by_training_mode():
    # a LoRA adapter wants ~10x a full fine-tune's rate (TRL's "LoRA Without Regret": SFT 2e-4 with LoRA)
    lora = _gpu().training
    assert not lora.full_finetune
    assert (lora.rl_lr, lora.sft_lr) == (5e-5, 2e-4)
    full = _gpu(APPLIANCE_TRAINING__FULL_FINETUNE="true").training
    assert (full.rl_lr, full.sft_lr) == (1e-5, 2e-5)
    mine = _gpu(APPLIANCE_TRAINING__LEARNING_RATE="3e-5", APPLIANCE_TRAINING__SFT_LEARNING_RATE="1e-4").training
    assert (mine.rl_lr, mine.sft_lr) == (3e-5, 1e-4)


def test_the_cpu_profiles_measured_rates_stay_and_a_flipped_mode_follows():
    cpu = load_settings(environ={"APPLIANCE_HOME": "/nonexistent"}).training
    assert (cpu.rl_lr, cpu.sft_lr) == (3e-5, 1.5e-4)  # measured on the bundled model (settings.py)
    cfg = TrainingSettings()
    cfg.full_finetune = True  # the rate is the mode's at the time it is read, not at load
    assert (cfg.rl_lr, cfg.sft_lr) == (1e-5, 2e-5)


def test_a_lora_rank_above_the_engines_is_refused_when_the_settings_load():
    with pytest.raises(ConfigError, match=r"training.lora_rank 128 is above engine.max_lora_rank 64") as e:
        _gpu(APPLIANCE_TRAINING__LORA_RANK="128")
    assert "max_lora_rank = 128" in e.value.hint
    assert _gpu(APPLIANCE_TRAINING__LORA_RANK="128", APPLIANCE_ENGINE__MAX_LORA_RANK="128").training.lora_rank == 128
    # a full fine-tune loads no adapter: its lora_rank is unused
    assert _gpu(APPLIANCE_TRAINING__LORA_RANK="128", APPLIANCE_TRAINING__FULL_FINETUNE="1").training.full_finetune


def test_a_lora_rank_set_after_loading_is_refused_before_serving_pauses(settings, store):
    from appliance.testing import FakeEngine
    from appliance.training.learn import learn
    from practice_data import practice  # tests/training/practice_data.py

    settings.training.full_finetune = False
    settings.training.method = "grpo"
    settings.training.lora_rank = settings.engine.max_lora_rank * 2
    engine = FakeEngine()
    with pytest.raises(ConfigError, match="above engine.max_lora_rank"):
        learn(store, settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=0)
    assert engine.calls == [] and engine.serving
