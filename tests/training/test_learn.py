"""The time-sliced LEARN phase against the fake engine: order, checkpoints, metrics, events, resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import ApplianceError, EngineError, Interrupted
from appliance.schemas import Checkpoint
from appliance.testing import FakeEngine
from appliance.training.advantages import build_groups
from appliance.training.learn import drop_stale_optimizer_states, learn, split_groups
from appliance.training.trainer import OPTIMIZER_FILE
from practice_data import practice  # tests/training/practice_data.py


@pytest.fixture
def tiny_settings(settings, tiny_model):
    settings.engine.model = tiny_model
    settings.training.method = "grpo"  # pinned: profiles choose their own default
    settings.training.full_finetune = False  # these check adapter folders; the cpu profile trains all weights
    settings.training.learning_rate = 1e-2
    settings.training.micro_batch_size = 4
    return settings


def test_only_each_runs_newest_checkpoint_keeps_its_optimizer_state(store, tmp_path):
    def checkpoint(run_id: str, version: int) -> Path:
        folder = tmp_path / f"v{version}"
        (folder / "trainer").mkdir(parents=True)
        (folder / OPTIMIZER_FILE).write_bytes(b"moments")
        (folder / "model.safetensors").write_bytes(b"weights")
        store.add_checkpoint(Checkpoint(run_id, version, version, "full", str(folder)))
        return folder

    a1, a2, b3, a4 = checkpoint("a", 1), checkpoint("a", 2), checkpoint("b", 3), checkpoint("a", 4)
    assert drop_stale_optimizer_states(store) == [a1 / OPTIMIZER_FILE, a2 / OPTIMIZER_FILE]
    assert [(f / OPTIMIZER_FILE).exists() for f in (a1, a2, b3, a4)] == [False, False, True, True]
    assert all((f / "model.safetensors").exists() for f in (a1, a2, b3, a4))
    assert drop_stale_optimizer_states(store) == []  # idempotent: a crash before or after it loses nothing


def test_split_groups_keeps_groups_whole():
    rollouts, samples = practice({"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 0.0]})
    parts = split_groups(build_groups(rollouts, samples), 2)
    assert [sorted({s.group_id for s in p.samples}) for p in parts] == [["a", "b"], ["c"]]
    assert [p.valid_groups for p in parts] == [2, 1]
    assert len(split_groups(build_groups(rollouts, samples), 10)) == 3  # never more steps than groups


@pytest.mark.slow
def test_learn_pauses_trains_syncs_and_resumes(store, tiny_settings):
    engine = FakeEngine()
    rollouts, samples = practice({"a": [1.0, 0.0, None], "b": [None, None, None], "c": [0.0, 1.0]})
    result = learn(store, tiny_settings, engine, rollouts, samples, run_id="run", iteration=0, steps=2)
    assert engine.calls == ["pause", "sync"] and engine.serving
    assert result.policy_version == 1 == engine.policy_version
    assert engine.loaded == [(tiny_settings.checkpoints_dir / "v1", "lora")]
    ckpt = store.latest_checkpoint("run")
    assert ckpt.policy_version == 1 and ckpt.kind == "lora" and ckpt.path == str(tiny_settings.checkpoints_dir / "v1")
    assert ckpt.metrics["global_step"] == 2 and "loss" in ckpt.metrics
    for name in ("loss", "reward_mean", "reward_std", "valid_groups", "dropped_groups", "infra_error_rate",
                 "logprob_gap_mean", "logprob_gap_max", "is_ratio_mean", "is_ratio_min", "is_ratio_max",
                 "is_clipped_frac", "tokens_per_s", "step_time_s", "pause_s", "sync_s", "train_s", "save_s"):
        assert store.metric_series("run", name), name
    assert [v for _, v in store.metric_series("run", "dropped_groups")] == [1.0, 0.0]
    assert store.metric_series("run", "infra_error_rate")[0][1] == pytest.approx(4 / 8)
    events = [e for e in store.events("run", kind="train")]
    assert [e.message for e in events] == ["engine paused for training", "trained", "weights synced"]
    assert all(e.duration_s is not None and e.duration_s >= 0 for e in events)

    # the next phase resumes from v1: steps continue and v2 is written beside it
    second = learn(store, tiny_settings, engine, *practice({"d": [1.0, 0.0]}, seed=1), run_id="run", iteration=1)
    assert second.policy_version == 2 and second.checkpoint.metrics["global_step"] == 3
    assert (tiny_settings.checkpoints_dir / "v2" / "adapter_model.safetensors").exists()
    assert [c.policy_version for c in store.checkpoints("run")] == [1, 2]
    # only the newest checkpoint keeps the optimizer state a resume reads; v1 keeps its weights
    assert (tiny_settings.checkpoints_dir / "v2" / OPTIMIZER_FILE).exists()
    assert not (tiny_settings.checkpoints_dir / "v1" / OPTIMIZER_FILE).exists()
    assert (tiny_settings.checkpoints_dir / "v1" / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_a_failed_sync_leaves_the_old_weights_serving(store, tiny_settings):
    engine = FakeEngine(fail_load=True)
    with pytest.raises(EngineError):
        learn(store, tiny_settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=0)
    assert engine.calls == ["pause", "sync"] and engine.serving and engine.policy_version == 0
    assert store.latest_checkpoint("run") is None


@pytest.mark.slow
def test_a_failed_training_resumes_serving(store, tiny_settings):
    engine = FakeEngine()
    tiny_settings.engine.model = tiny_settings.home / "no-such-model"
    with pytest.raises(ApplianceError, match="no Hugging Face model folder"):
        learn(store, tiny_settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=0)
    assert engine.calls == ["pause", "resume"] and engine.serving
    assert store.events("run", kind="train")[-1].message == "serving resumed without new weights"


def test_a_failed_step_frees_what_it_held_before_the_engine_wakes(store, settings, monkeypatch):
    """An exception's traceback holds the failing step's frames, and with them its tensors (on a GPU the
    logits and activations of an OOM) and the trainer: waking the engine into that memory fails again."""
    import weakref

    import torch

    from appliance.training import learn as learn_module
    from appliance.training import trainer as trainer_module

    held: dict[str, weakref.ref] = {}

    class Trainer:  # the PolicyTrainer's place: its weights, no model to load
        def __init__(self, *args, **kwargs) -> None:
            self.weights = torch.ones(1024)

    def failing_steps(trainer, *args, **kwargs):
        activations = torch.ones(1024)  # what a step holds when it fails
        held.update(activations=weakref.ref(activations), trainer=weakref.ref(trainer))
        raise RuntimeError("CUDA out of memory (a step that failed)")

    class Engine(FakeEngine):
        def resume(self) -> None:
            self.alive_at_wake = sorted(name for name, ref in held.items() if ref() is not None)
            super().resume()

    monkeypatch.setattr(trainer_module, "PolicyTrainer", Trainer)
    monkeypatch.setattr(learn_module, "run_steps", failing_steps)
    engine = Engine()
    with pytest.raises(RuntimeError, match="out of memory"):
        learn(store, settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=0)
    assert engine.calls == ["pause", "resume"]
    assert engine.alive_at_wake == []


@pytest.mark.slow
def test_a_stop_between_steps_saves_the_training_and_the_next_phase_finishes_it_repeating_nothing(
        store, tiny_settings, tmp_path):
    """Issue 52: a stop (`appliance stop --now`, SIGTERM) between two optimizer steps of a phase (SFT's or
    GRPO's) keeps what was trained; the next start finishes the phase from there, repeating no step, and
    ends on the weights an uninterrupted phase ends on. Before: Interrupted threw the training away."""
    from safetensors.torch import load_file

    from appliance.store import Store
    from appliance.training.learn import Steer
    from appliance.training.midway import midway_dir

    tiny_settings.training.method = "both"
    tiny_settings.training.sft_batch_size = 1
    groups = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 0.0]}
    rollouts, samples = practice(groups)
    demos = samples[:1]  # SFT: 3 successes + 1 demonstration = 4 steps, then 3 GRPO steps
    whole_settings = tiny_settings.model_copy(deep=True)
    whole_settings.home = tmp_path / "whole"
    whole_store = Store(whole_settings.db_path)
    whole = learn(whole_store, whole_settings, FakeEngine(), rollouts, samples, run_id="run", iteration=1, steps=3,
                  demonstrations=demos)
    whole_store.close()
    assert whole.checkpoint.metrics["global_step"] == 4  # SFT's row, then one per GRPO step
    assert len(whole.steps) == 4

    seen: list[tuple[int, int]] = []
    stop_at = {2, 5}  # inside SFT (2 of its 4 steps done), then inside GRPO (one of its 3 done)

    def word() -> str:
        return "stop" if seen[-1][0] in stop_at else "go"

    folder = midway_dir(tiny_settings.checkpoints_dir, "run", 1)
    for stop in (2, 5):
        engine = FakeEngine()  # the process ends on a stop: the next start starts another engine
        with pytest.raises(Interrupted, match=f"training step {stop + 1} of 7 not started"):
            learn(store, tiny_settings, engine, rollouts, samples, run_id="run", iteration=1, steps=3,
                  demonstrations=demos, steer=Steer(word, lambda done, total: seen.append((done, total))))
        assert (folder / "midway.json").exists()  # what it trained is kept, not published
        assert store.latest_checkpoint("run") is None and engine.policy_version == 0
        stop_at.discard(stop)
    assert [d for d, _ in seen] == [0, 1, 2, 2, 3, 4, 5] and {t for _, t in seen} == {7}
    assert store.metric_series("run", "sft_loss") == [(1, pytest.approx(whole.steps[0]["sft_loss"]))]
    result = learn(store, tiny_settings, FakeEngine(), rollouts, samples, run_id="run", iteration=1, steps=3,
                   demonstrations=demos, steer=Steer(word, lambda done, total: seen.append((done, total))))
    assert [d for d, _ in seen[7:]] == [5, 6]  # the last two GRPO steps: none ran twice
    assert result.checkpoint.metrics["global_step"] == 4 and len(result.steps) == 4
    assert [g for g, _ in store.metric_series("run", "loss")] == [2, 3, 4]  # one row per global step
    for name in ("sft_loss", "sft_tokens"):
        assert result.steps[0][name] == pytest.approx(whole.steps[0][name])
    assert [s["loss"] for s in result.steps[1:]] == pytest.approx([s["loss"] for s in whole.steps[1:]], rel=1e-4)
    a = load_file(str(whole_settings.checkpoints_dir / "v1" / "adapter_model.safetensors"))
    b = load_file(str(tiny_settings.checkpoints_dir / "v1" / "adapter_model.safetensors"))
    for name in a:  # the same weights as the phase that never stopped: nothing lost, nothing done twice
        assert (b[name] - a[name]).abs().max() < 1e-5, name
    assert not folder.exists()  # the published checkpoint replaces it


def test_a_paused_phase_starts_no_step_until_resumed(monkeypatch):
    import threading
    import time

    from appliance.training.learn import Steer, run_steps

    class Spy:
        value_head = None
        steps = 0

        def freeze_old_logps(self, p):
            pass

        def assign_credit(self, p):
            return p

        def grpo_step(self, p):
            Spy.steps += 1
            return {}

    held = threading.Event()
    held.set()
    steer = Steer(lambda: "hold" if held.is_set() else "go")
    worker = threading.Thread(target=run_steps, args=(Spy(), [], ["one", "two"], lambda m: None, steer.safe_point))
    worker.start()
    time.sleep(0.5)
    assert Spy.steps == 0 and worker.is_alive()  # held at the first step's safe point
    held.clear()
    worker.join(timeout=5)
    assert Spy.steps == 2


def test_a_stop_whose_save_fails_stays_a_stop():
    """A full disk while saving the midway state must not turn the stop into the phase's failure."""
    from appliance.training.learn import Steer, run_steps

    class Spy:
        value_head = None

        def freeze_old_logps(self, p):
            pass

        def assign_credit(self, p):
            return p

        def grpo_step(self, p):
            return {}

    def keep(_work):
        raise OSError(28, "No space left on device")

    words = iter(["go", "stop"])  # the first step runs, the stop comes before the second
    steer = Steer(lambda: next(words))
    with pytest.raises(Interrupted, match="saving the 1 steps done failed .*No space left"):
        run_steps(Spy(), [], ["one", "two"], lambda m: None, steer.safe_point, keep=keep)


def test_nothing_to_train_leaves_the_engine_serving(store, settings):
    settings.training.method = "grpo"
    engine = FakeEngine()
    rollouts, samples = practice({"a": [None, None], "b": [1.0, None]})
    result = learn(store, settings, engine, rollouts, samples, run_id="run", iteration=0)
    assert engine.calls == [] and result.checkpoint is None and result.policy_version == 0
    assert store.metric_series("run", "dropped_groups") == [(0, 2.0)]
    assert store.metric_series("run", "infra_error_rate") == [(0, 0.75)]


@pytest.mark.slow
def test_method_both_runs_sft_then_grpo(store, tiny_settings):
    tiny_settings.training.method = "both"
    engine = FakeEngine()
    result = learn(store, tiny_settings, engine, *practice({"a": [1.0, 0.0]}), run_id="run", iteration=0)
    assert "sft_loss" in result.steps[0] and "loss" in result.steps[1]
    assert result.steps[0]["sft_tokens"] == 10  # only the successful rollout's sampled tokens
    assert result.policy_version == 1
