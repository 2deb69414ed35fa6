"""Steering a real `appliance run` (issue 52): pause, resume and `stop --now` in the middle of the baseline
evaluation and of the training phase, then `appliance run` again, which finishes the run.

The checks of the issue's Done-when, on the tiny model (a chaos case: `scripts/chaos steering`): a pause is
answered within 5 s; once what was in flight has ended (within 60 s), no rollout and no training step starts
while paused; resume goes on; `stop --now` ends the process within 90 s; the continued run records no rollout
twice and repeats no training step (one metrics row per global step), and the phase stopped in TRAIN goes on
from its midway state. The SFT is stretched (batch 1, many epochs) so the training phase lasts long enough to
be steered. What it measured is printed (`-s`) and in the assertion messages.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from appliance import control
from appliance.config import Settings
from appliance.schemas import RolloutStatus
from appliance.store import Store
from faults.live_run import LiveRun, check_consistent, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

ANSWER_S = 5.0  # the Done-when's bounds
SETTLE_S = 60.0
EXIT_S = 90.0
HELD_S = 20.0  # how long nothing may start while paused


def started(store: Store, run_id: str) -> int:
    return sum(r.status != RolloutStatus.PENDING for r in store.rollouts(run_id))


def steps_done(store: Store) -> int:
    beat = store.heartbeat()
    return int((beat.progress or {}).get("steps_done") or 0) if beat else 0


def steer(run: LiveRun, where: str, measured: dict[str, Any], *, training: bool) -> None:
    """Pause, check that nothing starts, resume, then stop now and start `appliance run` again."""
    assert run.proc is not None
    store = Store(run.settings.db_path)
    try:
        run_id = store.latest_run().id
        t0 = time.monotonic()
        paused = control.request(store, "pause", timeout_s=30)
        measured[f"{where}: pause answered (s)"] = round(time.monotonic() - t0, 2)
        measured[f"{where}: pause answer"] = paused.result
        assert time.monotonic() - t0 < ANSWER_S, measured
        if training:
            assert (paused.result or "").startswith("pausing: training"), measured
        # what was in flight ends (rollouts finish and are recorded; the training step in flight ends)
        t0 = time.monotonic()
        assert wait_for(lambda: not store.rollouts(run_id, status=RolloutStatus.RUNNING), SETTLE_S), measured
        time.sleep(2.0)  # a step in flight ends and the safe point holds the next
        measured[f"{where}: settled (s)"] = round(time.monotonic() - t0, 1)
        before = (started(store, run_id), steps_done(store))
        time.sleep(HELD_S)
        after = (started(store, run_id), steps_done(store))
        measured[f"{where}: rollouts started, training steps done, over {HELD_S:g} s paused"] = (before, after)
        assert before == after, measured
        resumed = control.request(store, "resume", timeout_s=30)
        assert resumed.result == "running", measured
        if training:  # let it take a few steps, so the stop has training to keep
            wait_for(lambda: steps_done(store) >= after[1] + 2, 120)
            measured[f"{where}: steps done at stop"] = steps_done(store)
        else:
            wait_for(lambda: started(store, run_id) > after[0], 60)
        t0 = time.monotonic()
        stopped = control.request(store, "stop_now", timeout_s=30)
        measured[f"{where}: stop answer"] = stopped.result
        code = run.proc.wait(timeout=600)
        measured[f"{where}: stop --now to exit (s)"] = round(time.monotonic() - t0, 1)
        assert code == 0, run.tail()
        assert time.monotonic() - t0 < EXIT_S, measured
        assert not store.rollouts(run_id, status=RolloutStatus.RUNNING)
        if training:
            midway = list(run.settings.checkpoints_dir.glob("midway-*"))
            measured[f"{where}: midway state saved"] = [p.name for p in midway]
    finally:
        store.close()
    run.start()  # `appliance run` again: the same run, from there


@pytest.mark.timeout(3600)
def test_pause_resume_and_stop_now_mid_evaluation_and_mid_training(sandbox_settings: Settings, tiny_model: Path,
                                                                   tmp_path: Path) -> None:
    run = LiveRun.create(sandbox_settings, tmp_path / "home", tiny_model, tmp_path / "run.log",
                         APPLIANCE_TRAINING__SFT_BATCH_SIZE="1", APPLIANCE_TRAINING__SFT_EPOCHS="400",
                         APPLIANCE_LOOP__HELDOUT_PER_CELL="6")  # rollouts left to hold back at the pause
    measured: dict[str, Any] = {}
    run.start()
    try:
        code = run.drive([("baseline eval", lambda r: steer(r, "baseline eval", measured, training=False)),
                          ("training", lambda r: steer(r, "training", measured, training=True))], deadline_s=3300)
        assert code == 0, run.tail()
    finally:
        run.stop()
        print("\nmeasured:", *(f"  {k}: {v}" for k, v in measured.items()), sep="\n")
    assert run.injected == ["baseline eval", "training"], (run.injected, measured)
    store = check_consistent(run.settings, run.env)
    try:
        run_id = store.latest_run().id
        practice = store.rollouts(run_id, iteration=1, purpose="train")
        sizes = Counter(r.group_id for r in practice)
        assert sizes and set(sizes.values()) == {run.settings.loop.group_size}, sizes  # none lost, none twice
        for name in ("sft_loss", "loss", "train_s"):  # one metrics row per global step: no step repeated
            steps = [g for g, _ in store.metric_series(run_id, name)]
            assert len(steps) == len(set(steps)), (name, steps)
        went_on = [e.data for e in store.events(run_id, kind="train") if e.message.startswith("training goes on")]
        measured["training: went on from"] = went_on
        print("went on from:", went_on)
        assert not list(run.settings.checkpoints_dir.glob("midway-*"))  # the finished phase replaced it
        assert "Traceback" not in run.log.read_text(errors="replace")
    finally:
        store.close()
