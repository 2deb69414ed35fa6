"""A sync the engine refuses keeps what LEARN trained (issue 46, item 4): `learn` raises SyncRolledBack with
the saved checkpoint, and the next LEARN given it as `resume` trains on from those weights, not the served
version's."""

from __future__ import annotations

import pytest

from appliance.testing import FakeEngine
from appliance.training.learn import SyncRolledBack, learn
from practice_data import practice  # tests/training/practice_data.py


@pytest.mark.slow
def test_a_refused_sync_hands_back_its_checkpoint_and_the_next_learn_resumes_from_it(store, settings,
                                                                                      tiny_model) -> None:
    settings.engine.model = tiny_model
    settings.training.method, settings.training.full_finetune = "grpo", False
    settings.training.learning_rate, settings.training.micro_batch_size = 1e-2, 4
    engine = FakeEngine(fail_load=True)
    with pytest.raises(SyncRolledBack, match="fake engine refused") as refused:
        learn(store, settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=1, steps=2)
    kept = refused.value.checkpoint
    assert kept.path == str(settings.checkpoints_dir / "v1") and kept.kind == "lora" and kept.iteration == 1
    assert kept.metrics["global_step"] == 1 and "loss" in kept.metrics
    assert engine.policy_version == 0 and store.latest_checkpoint("run") is None  # nothing was published
    moved = settings.checkpoints_dir / "v1-refused-it1"
    (settings.checkpoints_dir / "v1").rename(moved)  # as the TRAIN phase keeps it
    kept.path = str(moved)

    engine.fail_load = False
    result = learn(store, settings, engine, *practice({"b": [0.0, 1.0]}, seed=1), run_id="run", iteration=2,
                   resume=kept)
    assert result.policy_version == 1 and result.checkpoint is not None
    assert result.checkpoint.metrics["global_step"] == 2  # counted on from the refused weights' step
    assert engine.loaded == [(settings.checkpoints_dir / "v1", "lora")]
