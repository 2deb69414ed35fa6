"""Issue 54: the learning signal reads a real LEARN phase's figures back from what it recorded (the `trained`
event's step range and the steps' metric rows), two phases in a row, the second not mixing in the first's."""

from __future__ import annotations

import pytest

from appliance.learning_signal import learning_signal
from appliance.testing import FakeEngine
from appliance.training.learn import learn
from practice_data import practice  # tests/training/practice_data.py


@pytest.mark.slow
def test_the_signal_is_each_phases_own_sft_and_grpo_steps(store, settings, tiny_model) -> None:
    settings.engine.model = tiny_model
    settings.training.method = "both"
    settings.training.full_finetune = False
    settings.training.micro_batch_size = 4
    store.create_run("run", {})
    engine = FakeEngine()
    first = learn(store, settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=1)
    second = learn(store, settings, engine, *practice({"a": [1.0, 0.0], "b": [0.0, 1.0]}, seed=1), run_id="run",
                   iteration=2, steps=2)
    for result, iteration in ((first, 1), (second, 2)):
        s = learning_signal(store, "run", iteration, group_size=2)
        grpo = [step for step in result.steps if "trained_tokens" in step]
        assert s.rl_steps == len(grpo) == iteration  # one GRPO step, then two
        assert s.rl_trained_tokens == sum(step["trained_tokens"] for step in grpo) > 0
        assert s.rl_samples == sum(step["samples"] for step in grpo)
        assert s.entropy == pytest.approx(sum(step["trained_tokens"] * step["entropy"] for step in grpo)
                                          / s.rl_trained_tokens)
        assert s.sft_tokens == result.steps[0]["sft_tokens"] == 10 * iteration  # each success's 10 sampled tokens
        assert s.sft_steps == result.steps[0]["sft_steps"]
