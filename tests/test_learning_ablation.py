"""Issue 54: the learning bench's ablation arms switch each learner off by a setting (`training.method` = sft
for the RL step, `training.sft_on_successes` for SFT on the policy's own successes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from appliance.config import Settings, TrainingSettings
from appliance.hindsight import Relabelled
from appliance.loop import Loop
from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample
from appliance.store import Store
from appliance.training.sft import own_successes


def test_sft_on_successes_off_leaves_the_iterations_successes_out_of_sft() -> None:
    rollouts = [Rollout(rid, "run", "t", "g", 1, "builtin", 0, RolloutStatus.FINISHED, outcome=o, reward=1.0)
                for rid, o in (("a", Outcome.SUCCESS), ("b", Outcome.FAILURE))]
    samples = [Sample(r.id, "g", 0, [1, 2, 3], [0, 1, 1], [0.0] * 3, 0) for r in rollouts]
    assert [s.rollout_id for s in own_successes(TrainingSettings(method="both"), rollouts, samples)] == ["a"]
    assert own_successes(TrainingSettings(method="both", sft_on_successes=False), rollouts, samples) == []
    assert own_successes(TrainingSettings(method="grpo"), rollouts, samples) == []


@pytest.mark.parametrize("on", [True, False])
def test_sft_on_successes_off_keeps_successes_out_of_the_demonstration_pool(settings: Settings, store: Store,
                                                                             monkeypatch, on: bool) -> None:
    from appliance.phases import train

    settings.loop.families = ["files"]
    settings.loop.heldout_levels = [2]
    settings.loop.heldout_per_cell = 1
    settings.training.sft_on_successes = on
    engine = SimpleNamespace(policy_version=0, base_url="http://unused", model_name=lambda: "policy")
    lp = Loop(settings, store, engine, practice=None, log=lambda _: None)
    lp.context.chat_tokenizer = object()  # never asked to tokenize: the relabelling below is a recorder
    called: list[int] = []
    monkeypatch.setattr(train, "relabel_hindsight",
                        lambda store, run_id, index, tokenize, keep_successes: called.append(index) or Relabelled())
    train.demonstration_mix(lp.context, 1, 0)
    assert called == ([1] if on else [])
