"""The maths around the exact tokens (issue 15): no step without signal, pi_old fixed for the phase, the
sampling temperature, one rollout one unit, truncation counted."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from appliance.config import TrainingSettings
from appliance.testing import FakeEngine
from appliance.training.advantages import build_groups
from appliance.training.learn import learn, run_steps, split_groups
from appliance.training.trainer import PolicyTrainer
from appliance.trajectories import truncation
from practice_data import practice  # tests/training/practice_data.py


@pytest.fixture
def tiny_settings(settings, tiny_model):
    settings.engine.model = tiny_model
    settings.training.method = "grpo"
    settings.training.learning_rate = 1e-2
    settings.training.micro_batch_size = 4
    return settings


def cfg(**kw) -> TrainingSettings:
    return TrainingSettings(**{"learning_rate": 1e-2, "micro_batch_size": 2, **kw})


# --- 1. no step, no version, without signal --------------------------------------------------------

def test_zero_variance_groups_are_dropped_before_the_steps_are_dealt():
    rollouts, samples = practice({"a": [1.0, 1.0], "b": [0.0, 1.0], "c": [0.0, 0.0], "d": [1.0, 0.0]})
    batch = build_groups(rollouts, samples, keep_zero_std=False)
    assert (batch.valid_groups, batch.zero_std_groups, batch.signal_groups) == (4, 2, 2)
    assert {s.group_id for s in batch.samples} == {"b", "d"}
    parts = split_groups(batch, 2)
    assert [p.signal_groups for p in parts] == [1, 1]  # every step has something to learn
    assert build_groups(rollouts, samples).samples[0].group_id == "a"  # kept for a KL term when asked


@pytest.mark.slow
def test_all_equal_groups_change_no_weight_and_publish_no_version(store, tiny_settings):
    engine = FakeEngine()
    learn(store, tiny_settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=0)
    assert engine.calls == ["pause", "sync"] and engine.policy_version == 1
    second = learn(store, tiny_settings, engine, *practice({"b": [1.0, 1.0], "c": [0.0, 0.0]}, seed=1),
                   run_id="run", iteration=1, steps=2)
    assert engine.calls == ["pause", "sync"]  # not paused, nothing synced
    assert second.policy_version == 1 and second.checkpoint is None
    assert not (tiny_settings.checkpoints_dir / "v2").exists()
    assert [c.policy_version for c in store.checkpoints("run")] == [1]
    assert store.metric_series("run", "groups_with_signal")[-1][1] == 0.0
    assert store.metric_series("run", "zero_std_groups")[-1][1] == 2.0
    assert any(e.message.startswith("no signal") for e in store.events("run", kind="train"))


@pytest.mark.slow
def test_a_step_without_advantage_leaves_weights_and_optimizer_as_they_are(tiny_model):
    trainer = PolicyTrainer(cfg(), tiny_model)
    trainer.grpo_step(build_groups(*practice({"a": [1.0, 0.0]})))  # AdamW now has momentum
    before = trainer.trainable_state()
    steps_before = [s["step"] for s in trainer.optimizer.state_dict()["state"].values()]
    flat = build_groups(*practice({"b": [1.0, 1.0]}, seed=1))  # kept (keep_zero_std): advantage 0 everywhere
    assert flat.samples and not any(s.advantage for s in flat.samples)
    metrics = trainer.grpo_step(flat)
    after = trainer.trainable_state()
    assert metrics["skipped_steps"] == 1.0 and metrics["trained_tokens"] == 0
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert [s["step"] for s in trainer.optimizer.state_dict()["state"].values()] == steps_before


# --- 3. pi_old fixed before the phase's first update -------------------------------------------------

@pytest.mark.slow
def test_the_second_step_of_a_phase_clips_against_the_policy_that_sampled(tiny_model):
    trainer = PolicyTrainer(cfg(epsilon=1e-3, learning_rate=5e-2), tiny_model)
    rollouts, samples = practice({"a": [1.0, 0.0, 0.0, 1.0], "b": [0.0, 1.0, 1.0, 0.0]})
    parts = split_groups(build_groups(rollouts, samples), 2)
    steps: list[dict[str, float]] = []
    run_steps(trainer, [], parts, steps.append)
    assert steps[0]["clip_ratio"] == 0.0  # the first step: ratio 1
    assert steps[1]["clip_ratio"] > 0.0  # the policy moved since it sampled; the clip acts


@pytest.mark.slow
def test_old_logprobs_are_frozen_before_the_sft_update(tiny_model, monkeypatch):
    trainer = PolicyTrainer(cfg(), tiny_model)
    rollouts, samples = practice({"a": [1.0, 0.0]})
    parts = split_groups(build_groups(rollouts, samples), 1)
    before = trainer.logps(parts[0].samples)
    calls = []

    class Spy:  # stands in for the trainer: records the order of the phase's work
        cfg = trainer.cfg

        def freeze_old_logps(self, p):
            calls.append("freeze")

        def assign_credit(self, p):
            return p

        def grpo_step(self, p):
            calls.append("grpo")
            return {}

    monkeypatch.setattr("appliance.training.sft.sft", lambda *a, **k: calls.append("sft") or {})
    run_steps(Spy(), [samples[0]], parts, lambda m: None)
    assert calls == ["freeze", "sft", "grpo"]
    trainer.freeze_old_logps(parts)
    assert trainer.old_logps[("a-0", 0)] == before[0]


def test_a_single_step_phase_needs_no_separate_old_logprob_pass(monkeypatch):
    calls = []

    class Spy:  # one GRPO step, nothing before it: the step's own detached logprobs are pi_old
        value_head = None

        def freeze_old_logps(self, p):
            calls.append("freeze")

        def assign_credit(self, p):
            return p

        def grpo_step(self, p):
            calls.append("grpo")
            return {}

    monkeypatch.setattr("appliance.training.sft.sft", lambda *a, **k: calls.append("sft") or {})
    run_steps(Spy(), [], ["part"], lambda m: None)  # type: ignore[list-item]
    assert calls == ["grpo"]
    run_steps(Spy(), [], ["one", "two"], lambda m: None)  # type: ignore[list-item]
    assert calls == ["grpo", "freeze", "grpo", "grpo"]


# --- 2. the sampling temperature --------------------------------------------------------------------

@pytest.mark.slow
def test_the_trainer_scores_each_sample_at_its_sampling_temperature(tiny_model):
    trainer = PolicyTrainer(cfg(), tiny_model)
    _, samples = practice({"a": [1.0]})
    hot = replace(samples[0], temperature=0.5)
    at_half, at_one = trainer.logps([hot])[0], trainer.logps([samples[0]])[0]
    assert at_half == pytest.approx(trainer.logps([samples[0]], temperature=0.5)[0], abs=1e-6)
    assert max(abs(a - b) for a, b in zip(at_half, at_one)) > 0.05
    # engine logprobs recorded at T=0.5 (processed) read as a zero gap; at T=1 (raw) they would not
    rollouts, samples = practice({"g": [1.0, 0.0]})
    samples = [replace(s, temperature=0.5) for s in samples]
    for s, lp in zip(samples, trainer.logps(samples)):
        s.logprobs = [v if m else 0.0 for v, m in zip(lp, s.mask)]
    assert trainer.grpo_step(build_groups(rollouts, samples))["logprob_gap_mean"] < 1e-5


# --- 5. one rollout, one unit -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "gspo", "dr_grpo", "dapo"])
def test_a_two_branch_rollout_weighs_as_one_sequence(tiny_model, loss_type):
    rollouts, samples = practice({"g": [1.0, 0.0, 0.0]})
    engine = PolicyTrainer(cfg(), tiny_model)  # engine logprobs = the trainer's: the IS weight is 1 everywhere
    for s, lp in zip(samples, engine.logps(samples)):
        s.logprobs = [v if m else 0.0 for v, m in zip(lp, s.mask)]
    whole = samples[0]
    first = [m if i < 16 else 0 for i, m in enumerate(whole.mask)]  # branch 0 trains the first turn
    second = [m if i >= 16 else 0 for i, m in enumerate(whole.mask)]  # branch 1 (same tokens) the second
    branched = [replace(whole, mask=first), replace(whole, branch=1, mask=second)] + samples[1:]

    def grads(batch_samples):
        trainer = PolicyTrainer(cfg(loss_type=loss_type, micro_batch_size=1), tiny_model)
        batch = build_groups(rollouts, batch_samples)
        trainable = trainer.trainable(batch.samples)
        trainer.model.train()
        trainer.backward(trainable, trainer.normaliser(trainable), trainer.units(trainable))
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    one, two = grads(samples), grads(branched)
    assert any(g.abs().sum() > 0 for g in one.values())
    for name in one:
        assert torch.allclose(one[name], two[name], atol=1e-6, rtol=1e-4), name


# --- 7. truncation counted -------------------------------------------------------------------------

def test_truncation_counts_the_trained_tokens_a_cut_drops():
    _, samples = practice({"a": [1.0, 0.0]}, extra={"a": 5})  # 10 prompt, 6 + 4 + 5 trained tokens
    assert truncation(samples, 100) == (0, 0)
    assert truncation(samples, 20) == (2 * (4 + 5), 2)  # the cut keeps 0..19: the last turns go


@pytest.mark.slow
def test_a_step_reports_truncation_and_the_signal_metrics(tiny_model):
    trainer = PolicyTrainer(cfg(max_seq_len=20), tiny_model)
    rollouts, samples = practice({"a": [1.0, 0.0]}, extra={"a": 5})
    rollouts = [replace(r, turns=3) for r in rollouts]
    m = trainer.grpo_step(build_groups(rollouts, samples))
    assert (m["truncated_tokens"], m["truncated_rollouts"]) == (18, 2)
    assert m["trained_tokens"] == 2 * 6 and m["response_tokens_mean"] == 6
    assert m["groups_with_signal"] == 1 and m["turns_mean"] == 3
    assert m["entropy"] > 0 and "clip_ratio" in m
