"""A run that starts on a trained policy trains on from it (the lineage's parent is true), not from the base."""

from __future__ import annotations

import pytest

from appliance.testing import FakeEngine
from appliance.training.learn import learn
from practice_data import practice  # tests/training/practice_data.py


@pytest.mark.slow
def test_a_new_run_trains_on_from_the_served_version(store, settings, tiny_model) -> None:
    settings.engine.model = tiny_model
    settings.training.method = "grpo"
    settings.training.full_finetune = False  # these check adapter folders; the cpu profile trains all weights
    settings.training.micro_batch_size = 4
    engine = FakeEngine()
    first = learn(store, settings, engine, *practice({"a": [1.0, 0.0], "c": [0.0, 1.0]}), run_id="run-1",
                  iteration=1, steps=2)
    assert first.policy_version == 1 and first.checkpoint.metrics["global_step"] == 2
    assert store.checkpoint_of_version(1).path == first.checkpoint.path
    # run-2 starts on v1 (its iteration 0 measured v1): its first LEARN phase resumes v1's adapter
    second = learn(store, settings, engine, *practice({"b": [0.0, 1.0]}, seed=1), run_id="run-2", iteration=1)
    assert second.policy_version == 2 and second.checkpoint.metrics["global_step"] == 3
    assert store.checkpoint_of_version(0) is None  # the base has no checkpoint
