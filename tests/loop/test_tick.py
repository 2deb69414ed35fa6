"""`Loop.tick` in process: the reconciler's order of phases, controls and their refusals, failures and
interruptions, against a real store and the fake engine. The phase bodies are replaced by recorders (each
phase's own work is tested in its room, and end to end by test_kill_and_resume.py)."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from types import SimpleNamespace

import pytest

from appliance import control
from appliance.config import Settings
from appliance.errors import ApplianceError, Interrupted
from appliance.loop import Loop
from appliance.schemas import ControlCommand, ControlStatus, IterationStatus, Phase, RunStatus
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.testing.phases import BASELINE_RUN, ITERATION_1_RUN, RecordedPhases

BASELINE, ITERATION_1 = BASELINE_RUN, ITERATION_1_RUN


@pytest.fixture
def loop(settings: Settings, store: Store) -> Loop:
    settings.loop.iterations = 1
    settings.loop.families = ["files"]
    practice = SimpleNamespace(stopping=threading.Event())  # the recorders use no sandbox and no proxy
    loop = Loop(settings, store, FakeEngine(), practice,  # type: ignore[arg-type]
                log=lambda _: None, phases=RecordedPhases())
    # one heartbeat, as the live loop's steering thread keeps it: `control.request` asks only a live loop;
    # here the loop answers in the requester's wait, by ticking (test_steering.py has the thread)
    store.beat(loop.run.id, os.getpid(), time.time(), None)
    return loop


def ticks(loop: Loop, n: int = 100) -> list[bool]:
    """Tick until a tick has nothing to do (at most n)."""
    results = []
    while len(results) < n:
        results.append(loop.tick())
        if not results[-1]:
            break
    return results


def test_the_baseline_then_one_iteration_phase_by_phase(loop: Loop, store: Store) -> None:
    run_id = loop.run.id
    assert store.tasks(run_id, split="heldout")  # fixed at run start
    for expected in BASELINE + ITERATION_1:
        assert loop.tick() is True
        assert loop.phases.ran[-1] == expected
        it = store.iterations(run_id)[expected[1]]
        assert it.status == IterationStatus.DONE if expected[0] == Phase.DIAGNOSE else it.phase != expected[0]
    assert loop.tick() is False  # iterations = 1: the run is done
    assert loop.phases.ran == BASELINE + ITERATION_1
    assert store.get_run(run_id).status == RunStatus.DONE and loop.finished()
    assert [(it.index, it.phase, it.status) for it in store.iterations(run_id)] == [
        (0, Phase.DONE, IterationStatus.DONE), (1, Phase.DONE, IterationStatus.DONE)]
    phase_events = [e.message for e in store.events(run_id) if e.kind == "phase"]
    assert sorted(phase_events) == sorted(str(p) for p, _ in BASELINE + ITERATION_1)


def test_pause_step_resume(loop: Loop, store: Store) -> None:
    run_id = loop.run.id
    paused = store.request_control(run_id, ControlCommand.PAUSE)
    assert loop.tick() is False and loop.phases.ran == []
    assert store.get_control(paused.id).status == ControlStatus.DONE
    assert store.get_control(paused.id).result == control.ANSWERS[ControlCommand.PAUSE]
    assert store.get_run(run_id).status == RunStatus.PAUSED
    assert loop.tick() is False and loop.phases.ran == []  # paused stays paused

    # step runs exactly one phase and leaves the run paused
    stepped = store.request_control(run_id, ControlCommand.STEP)
    assert loop.tick() is True and loop.phases.ran == BASELINE[:1]
    assert store.get_control(stepped.id).status == ControlStatus.DONE
    assert store.get_run(run_id).status == RunStatus.PAUSED
    assert loop.tick() is False and loop.phases.ran == BASELINE[:1]

    # control.request waits for the loop's answer; here the loop answers in the requester's wait
    resumed = control.request(store, "resume", sleep=lambda _: loop.tick())
    assert resumed.status == ControlStatus.DONE and resumed.result == "running"
    assert store.get_run(run_id).status == RunStatus.RUNNING
    ticks(loop)
    assert loop.phases.ran == BASELINE + ITERATION_1


def test_a_request_the_run_no_longer_allows_is_refused(loop: Loop, store: Store) -> None:
    """Two pauses asked while the run was running: the loop takes the first and refuses the second,
    which `control.request` raises; the refusal changes nothing else."""
    run_id = loop.run.id
    first = store.request_control(run_id, ControlCommand.PAUSE)
    with pytest.raises(control.ControlError, match="refused pause: cannot pause while the run is paused"):
        control.request(store, "pause", sleep=lambda _: loop.tick())
    assert store.get_control(first.id).status == ControlStatus.DONE
    refused = store.controls(run_id)[0]
    assert (refused.command, refused.status) == (ControlCommand.PAUSE, ControlStatus.REFUSED)
    assert store.get_run(run_id).status == RunStatus.PAUSED and loop.phases.ran == []
    # a step asked of a running run (it was paused when asked, resumed before the loop answered)
    store.set_run_status(run_id, RunStatus.RUNNING)
    step = store.request_control(run_id, ControlCommand.STEP)
    assert loop.tick() is True  # the run is running: the phase runs anyway, the step is refused
    assert store.get_control(step.id).status == ControlStatus.REFUSED
    assert store.get_control(step.id).result == "cannot step while the run is running"
    assert store.get_run(run_id).status == RunStatus.RUNNING
    messages = [e.message for e in store.events(run_id) if e.kind == "control"]
    assert "step: cannot step while the run is running" in messages


def test_stop_after_iteration_ends_the_iteration_then_stops(loop: Loop, store: Store) -> None:
    loop.settings.loop.iterations = 3
    run_id = loop.run.id
    ticks(loop, n=3)  # the baseline and synthesis of iteration 1
    store.request_control(run_id, ControlCommand.STOP_AFTER_ITERATION)
    ticks(loop)
    assert loop.phases.ran == BASELINE + ITERATION_1  # iteration 1 finished, no iteration 2
    assert store.get_run(run_id).status == RunStatus.STOPPED
    assert store.controls(run_id)[0].result == control.ANSWERS[ControlCommand.STOP_AFTER_ITERATION]


def test_a_stop_answered_before_a_restart_still_counts(loop: Loop, settings: Settings, store: Store) -> None:
    settings.loop.iterations = 3
    ticks(loop, n=3)
    store.request_control(loop.run.id, ControlCommand.STOP_AFTER_ITERATION)
    loop.tick()  # answered, then the process dies
    again = Loop(settings, store, FakeEngine(), loop.practice, log=lambda _: None, phases=RecordedPhases())
    assert again.run.id == loop.run.id
    ticks(again)
    assert store.get_run(loop.run.id).status == RunStatus.STOPPED
    assert len(store.iterations(loop.run.id)) == 2


def test_a_failed_phase_fails_its_iteration_and_is_retried(loop: Loop, store: Store) -> None:
    run_id = loop.run.id
    loop.phases.fail_once(Phase.EVALUATE, ApplianceError("the engine died", "restart it"))
    with pytest.raises(ApplianceError, match="the engine died"):
        loop.tick()
    it = store.iterations(run_id)[0]
    assert (it.phase, it.status) == (Phase.EVALUATE, IterationStatus.FAILED)
    assert any(e.kind == "error" and "evaluate failed: the engine died" in e.message for e in store.events(run_id))
    assert loop.tick() is True and loop.phases.ran == BASELINE[:1]  # the same phase again
    assert store.iterations(run_id)[0].status == IterationStatus.RUNNING


def test_an_interrupted_phase_is_redone_next_time(loop: Loop, store: Store) -> None:
    loop.phases.fail_once(Phase.EVALUATE, Interrupted("the appliance is stopping"))
    assert loop.tick() is False
    it = store.iterations(loop.run.id)[0]
    assert (it.phase, it.status) == (Phase.EVALUATE, IterationStatus.RUNNING)
    assert loop.tick() is True and loop.phases.ran == BASELINE[:1]


def test_practice_and_training_wait_for_the_training_window(loop: Loop, store: Store) -> None:
    later = dt.datetime.now() + dt.timedelta(hours=12)
    loop.settings.loop.training_window = f"{later:%H:%M}-{later + dt.timedelta(minutes=1):%H:%M}"
    ticks(loop)
    assert loop.phases.ran == BASELINE + ITERATION_1[:2]  # synthesize and validate run at any time
    assert store.iterations(loop.run.id)[1].phase == Phase.PRACTISE
    loop.settings.loop.training_window = None
    ticks(loop)
    assert loop.phases.ran == BASELINE + ITERATION_1
