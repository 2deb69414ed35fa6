"""The multi-process trainer (training.processes > 1): whole-group shards, global normalisers, workers launched
through accelerate (gloo on the CPU) that reproduce the in-process step, and a failing worker."""

from __future__ import annotations

import pytest

from appliance.config import TrainingSettings
from appliance.errors import ApplianceError, Interrupted
from appliance.testing import FAILING_TRAIN_WORKER, FakeEngine
from appliance.training import multiprocess
from appliance.training.advantages import build_groups
from appliance.training.distributed import shard_groups
from appliance.training.learn import learn
from practice_data import practice  # tests/training/practice_data.py


def test_shards_are_whole_groups_balanced_by_tokens():
    _, samples = practice({"a": [1.0, 0.0, 1.0], "b": [0.0, 1.0], "c": [1.0, 0.0], "d": [0.0, 1.0]},
                          extra={"a": 40})
    shards = [shard_groups(samples, rank, 2, max_len=4096) for rank in range(2)]
    assert [sorted({s.group_id for s in shard}) for shard in shards] == [["a"], ["b", "c", "d"]]
    assert sorted(s.rollout_id for shard in shards for s in shard) == sorted(s.rollout_id for s in samples)
    assert shard_groups(samples, 0, 1, max_len=4096) == samples
    assert shard_groups(samples[:2], 1, 2, max_len=4096) == []  # one group, two ranks: rank 1 idles


def test_processes_resolve_to_the_visible_gpus():
    assert multiprocess.resolve_processes(TrainingSettings()) == 1
    assert multiprocess.resolve_processes(TrainingSettings(processes=0), gpus=0) == 1
    assert multiprocess.resolve_processes(TrainingSettings(processes=0), gpus=8) == 8
    assert multiprocess.resolve_processes(TrainingSettings(processes=2), gpus=0) == 2  # gloo on the CPU
    with pytest.raises(ApplianceError, match="only 2 GPU"):
        multiprocess.resolve_processes(TrainingSettings(processes=4), gpus=2)


def test_gpu_profile_trains_on_every_gpu():
    from appliance.config import load_settings

    assert load_settings(environ={"APPLIANCE_PROFILE": "gpu", "APPLIANCE_HOME": "/nonexistent"}).training.processes == 0
    assert load_settings(environ={"APPLIANCE_HOME": "/nonexistent"}).training.processes == 1


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "gspo"])
def test_shard_gradients_sum_to_the_whole_steps(tiny_model, loss_type):
    """What each rank computes (its shard, the step's normaliser) sums to the one-process gradient."""
    import torch

    from appliance.training.trainer import PolicyTrainer

    trainer = PolicyTrainer(TrainingSettings(loss_type=loss_type, micro_batch_size=2, beta=0.05), tiny_model)
    rollouts, samples = practice({"a": [1.0, 0.0, 1.0], "b": [0.0, 1.0], "c": [1.0, 0.0, 0.0, 1.0]},
                                 extra={"b": 7})
    trainable = trainer.trainable(build_groups(rollouts, samples).samples)
    norm = trainer.normaliser(trainable)
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def grads(part):
        trainer.optimizer.zero_grad(set_to_none=True)
        stats = trainer.backward(part, norm)
        return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params], stats

    whole, whole_stats = grads(trainable)
    shards = [grads(shard_groups(trainable, rank, 2, max_len=4096)) for rank in range(2)]
    assert all(len(shard_groups(trainable, rank, 2, max_len=4096)) for rank in range(2))
    summed = [a + b for a, b in zip(shards[0][0], shards[1][0], strict=True)]
    assert any(g.abs().sum() > 0 for g in whole)
    for w, s in zip(whole, summed, strict=True):
        torch.testing.assert_close(s, w, rtol=1e-5, atol=1e-8)
    assert shards[0][1]["loss"] + shards[1][1]["loss"] == pytest.approx(whole_stats["loss"], rel=1e-5, abs=1e-8)


@pytest.fixture
def tiny_settings(settings, tiny_model):
    settings.engine.model = tiny_model
    settings.training.method = "grpo"  # pinned: profiles choose their own default
    settings.training.full_finetune = False  # these check adapter folders; the cpu profile trains all weights
    settings.training.learning_rate = 1e-2
    settings.training.micro_batch_size = 2
    settings.training.loss_type = "grpo"
    return settings


def job_processes(home) -> list[int]:
    return multiprocess._job_processes(home)


@pytest.mark.slow
def test_two_workers_take_the_same_step_as_one_process(store, tiny_settings, tmp_path):
    import torch
    from safetensors.torch import load_file

    from appliance.store import Store

    groups = {"a": [1.0, 0.0, 1.0], "b": [0.0, 1.0, None], "c": [1.0, 0.0, 0.0, 1.0]}
    one_settings = tiny_settings.model_copy(deep=True)
    one_settings.home = tmp_path / "one"
    one_store = Store(one_settings.db_path)
    one = learn(one_store, one_settings, FakeEngine(), *practice(groups, extra={"b": 7}), run_id="run", iteration=0)
    one_store.close()

    tiny_settings.training.processes = 2
    engine = FakeEngine()
    two = learn(store, tiny_settings, engine, *practice(groups, extra={"b": 7}), run_id="run", iteration=0)

    assert engine.calls == ["pause", "sync"] and two.policy_version == 1
    ckpt = store.latest_checkpoint("run")
    assert ckpt.path == str(tiny_settings.checkpoints_dir / "v1") and ckpt.metrics["global_step"] == 1
    # metrics recorded once, by the parent, with the whole step's counts
    assert len(store.metric_series("run", "loss")) == 1
    assert two.steps[0]["trained_tokens"] == one.steps[0]["trained_tokens"] == 9 * 10 + 2 * 7
    assert two.steps[0]["samples"] == one.steps[0]["samples"] == 9
    # grad_norm is the summed gradient's norm before clipping: a per-rank normaliser (or DDP's average) halves it
    for key in ("loss", "grad_norm", "logprob_gap_mean", "logprob_gap_max", "is_ratio_mean", "is_ratio_min",
                "is_ratio_max", "clip_ratio"):
        assert two.steps[0][key] == pytest.approx(one.steps[0][key], rel=1e-4, abs=1e-7), key
    assert {"load_s", "train_s", "save_s", "sync_s", "pause_s"} <= {
        name for name in ("load_s", "train_s", "save_s", "sync_s", "pause_s") if store.metric_series("run", name)}
    assert [e.data.get("processes") for e in store.events("run", kind="train") if e.message == "trained"] == [2]

    a = load_file(str(one_settings.checkpoints_dir / "v1" / "adapter_model.safetensors"))
    b = load_file(str(tiny_settings.checkpoints_dir / "v1" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    assert any(t.abs().sum() > 0 for name, t in b.items() if "lora_B" in name)  # the step moved B off zero
    lr = tiny_settings.training.learning_rate
    for name in a:
        # Adam's first step moves a weight by lr * g / (|g| + eps), less than lr = 1e-2. The two runs sum the
        # same fp32 terms in another order (other micro-batches and padding, two shards, the all-reduce), which
        # changes a gradient by ~1e-7 of its terms; only where a gradient nearly cancels, to ~eps = 1e-8, is that
        # a visible share of g (seen: 1.4e-6 on 1 of 2048 entries of one B matrix). atol = 1e-3 * lr is 7x that
        # and 1000x below the step. Adam is blind to a constant gradient scale, so a wrong normaliser shows up
        # in grad_norm and loss above, not here.
        torch.testing.assert_close(b[name], a[name], rtol=0.0, atol=1e-3 * lr)
    assert not job_processes(tiny_settings.home)


@pytest.mark.slow
def test_a_failing_worker_is_an_error_with_its_log_and_leaves_nothing_running(store, tiny_settings, monkeypatch):
    monkeypatch.setattr(multiprocess, "WORKER", FAILING_TRAIN_WORKER)
    tiny_settings.training.processes = 2
    stale = tiny_settings.home / "train-job-stale"  # what an appliance killed mid-phase leaves
    (stale / "job.json").parent.mkdir(parents=True)
    (stale / "job.json").write_text("{}")
    engine = FakeEngine()
    with pytest.raises(multiprocess.WorkerError) as failed:
        learn(store, tiny_settings, engine, *practice({"a": [1.0, 0.0], "b": [0.0, 1.0]}), run_id="run", iteration=0)
    message = str(failed.value)
    assert "exited with code" in message and "injected failure of training worker rank 1" in message
    assert "training.processes = 1" in message and str(tiny_settings.home / "logs" / "trainer.log") in message
    assert engine.calls == ["pause", "resume"] and engine.serving  # serving came back on the old weights
    assert store.latest_checkpoint("run") is None and not store.metric_series("run", "loss")
    assert not job_processes(tiny_settings.home)
    assert not list(tiny_settings.home.glob("train-job-*"))


@pytest.mark.slow
def test_workers_hold_and_stop_between_steps_and_the_next_phase_finishes_the_training(store, tiny_settings,
                                                                                      monkeypatch):
    """Issue 52: the workers hold before a step while the parent's word is hold, and on stop save the phase's
    midway state together and exit; the next phase goes on from it in workers again, repeating no step.
    Before: a stop killed the workers and threw the training away."""
    import time

    from appliance.training.learn import Steer
    from appliance.training.midway import midway_dir

    tiny_settings.training.processes = 2
    monkeypatch.setattr(multiprocess, "WORKER", FAILING_TRAIN_WORKER)
    monkeypatch.setenv("APPLIANCE_TEST_FAIL_RANK", "-1")  # none fails: the real worker, each step 2 s longer
    monkeypatch.setenv("APPLIANCE_TEST_STEP_S", "2")  # (the parent hears of a step within its 1 s poll)
    groups = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 0.0], "d": [0.0, 1.0]}
    seen: list[tuple[int, int]] = []
    word = {"now": "go"}
    held_at: list[float] = []

    def said() -> str:
        if seen and seen[-1][0] >= 1 and word["now"] == "go" and not held_at:
            word["now"], held_at[:] = "hold", [time.monotonic()]  # hold once one step is done ...
        elif held_at and time.monotonic() - held_at[0] > 3:
            word["now"] = "stop"  # ... and stop after three seconds of it
        return word["now"]

    def progress(done: int, total: int) -> None:
        seen.append((done, total))

    with pytest.raises(Interrupted):
        learn(store, tiny_settings, FakeEngine(), *practice(groups), run_id="run", iteration=1, steps=4,
              steer=Steer(said, progress))
    # held, then stopped, at the safe point after the parent heard of the first step (the workers had gone on
    # past the one it heard of: a word reaches them at their next safe point)
    done = seen[-1][0]
    assert 1 <= done < 4 and seen[-2:] == [(done, 4)] * 2 and {t for _, t in seen} == {4}
    assert [g for g, _ in store.metric_series("run", "loss")] == list(range(1, done + 1))  # the steps done
    assert (midway_dir(tiny_settings.checkpoints_dir, "run", 1) / "midway.json").exists()
    assert not job_processes(tiny_settings.home) and not list(tiny_settings.home.glob("train-job-*"))

    monkeypatch.setenv("APPLIANCE_TEST_STEP_S", "0")
    result = learn(store, tiny_settings, FakeEngine(), *practice(groups), run_id="run", iteration=1, steps=4)
    assert result.checkpoint.metrics["global_step"] == 4
    assert [g for g, _ in store.metric_series("run", "loss")] == [1, 2, 3, 4]  # no step twice, none lost
    assert not midway_dir(tiny_settings.checkpoints_dir, "run", 1).exists()


PARENT = """
import sys
from pathlib import Path
from appliance.config import load_settings
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.training.learn import learn
sys.path.insert(0, {tests!r})
from test_multiprocess import practice

s = load_settings(environ={{"APPLIANCE_HOME": {home!r}}})
s.engine.model = Path({model!r})
s.training.method, s.training.processes = "grpo", 2
groups = {{f"g{{i}}": [1.0, 0.0] for i in range(2000)}}  # 2000 steps: minutes of training left when killed
learn(Store(s.db_path), s, FakeEngine(), *practice(groups), run_id="run", iteration=0, steps=2000)
"""


@pytest.mark.slow
def test_workers_exit_when_the_appliance_process_is_killed(tiny_model, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    home = tmp_path / "home"
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=str(Path(__file__).parent), home=str(home), model=str(tiny_model)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while len(job_processes(home)) < 3:  # the launcher and two workers
            assert parent.poll() is None and time.monotonic() < deadline, "the workers never started"
            time.sleep(0.5)
    finally:
        parent.send_signal(signal.SIGKILL)  # no cleanup code of ours runs
        parent.wait()
    deadline = time.monotonic() + 30  # the workers look for their parent every second
    while job_processes(home) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = job_processes(home)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left


@pytest.mark.slow
def test_a_worker_killed_by_the_oom_killer_is_an_error_and_the_old_weights_serve_on(store, tiny_settings):
    """Issue 31: the OOM killer's SIGKILL of one training worker mid-step (the other then waits on it in a
    collective): the phase fails with the exit code and the workers' log, no checkpoint or metric is
    published, serving resumes on the old weights, and no process of the job is left."""
    import os
    import signal
    import threading
    import time

    tiny_settings.training.processes = 2
    engine = FakeEngine()
    outcome: list[BaseException | None] = []

    def phase() -> None:
        groups = {f"g{i}": [1.0, 0.0] for i in range(2000)}  # minutes of steps: only the kill ends them
        try:
            learn(store, tiny_settings, engine, *practice(groups), run_id="run", iteration=0, steps=2000)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            outcome.append(e)

    thread = threading.Thread(target=phase)
    thread.start()
    deadline = time.monotonic() + 600
    while len(job_processes(tiny_settings.home)) < 3 and thread.is_alive():  # the launcher and two workers
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.5)
    time.sleep(5)  # into the steps
    workers = job_processes(tiny_settings.home)
    os.kill(max(workers), signal.SIGKILL)  # the youngest: a worker, not the launcher
    thread.join(timeout=300)
    left = job_processes(tiny_settings.home)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not thread.is_alive(), "the phase hangs on a dead worker"
    assert isinstance(outcome[0], multiprocess.WorkerError), outcome
    assert "trainer.log" in str(outcome[0])
    assert engine.calls == ["pause", "resume"] and engine.serving
    assert store.latest_checkpoint("run") is None
    assert not left
