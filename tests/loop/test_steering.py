"""Steering that answers while a phase runs: a real Loop ticking in its own thread through a long stand-in
phase (rollouts that take a while each, through the phases' own resumable path), its steering thread
keeping the heartbeat, and requests made as `appliance pause|resume|stop` makes them."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

from appliance import control, practice
from appliance.config import Settings
from appliance.control import ControlError
from appliance.loop import Loop
from appliance.schemas import ControlCommand, ControlStatus, Phase, RolloutStatus, RunStatus
from appliance.status import read_status
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.testing.phases import RecordedPhases, SlowRollouts, SlowSteps, rollouts_phase, training_phase

N = 12  # rollouts in the stand-in evaluation
BEAT = 0.05


def make_loop(settings: Settings, store: Store) -> Loop:
    phases = RecordedPhases()
    phases[Phase.EVALUATE] = rollouts_phase(N)
    stand_in = SimpleNamespace(stopping=threading.Event(), pool=SimpleNamespace(max_concurrent=2))
    return Loop(settings, store, FakeEngine(), stand_in, log=lambda _: None,  # type: ignore[arg-type]
                phases=phases)


@pytest.fixture
def rollouts(monkeypatch: pytest.MonkeyPatch, store: Store) -> SlowRollouts:
    slow = SlowRollouts(store, seconds=0.3)
    monkeypatch.setattr(practice, "run_rollout", slow)
    return slow


@pytest.fixture
def loop(settings: Settings, store: Store) -> Iterator[Loop]:
    settings.loop.iterations = 1
    settings.loop.families = ["files"]
    loop = make_loop(settings, store)
    steering = loop.start_steering(interval_s=BEAT)
    yield loop
    steering.stop()


def ticking(loop: Loop) -> threading.Thread:
    """The first tick (the baseline's EVALUATE, the long phase) in a thread, as the scheduler runs it."""
    t = threading.Thread(target=loop.tick, daemon=True)
    t.start()
    return t


def wait_for(what: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def finished(store: Store, run_id: str) -> int:
    return sum(r.status == RolloutStatus.FINISHED for r in store.rollouts(run_id, iteration=0, purpose="eval"))


def test_a_request_is_answered_within_a_second_while_a_phase_runs(loop: Loop, store: Store,
                                                                   rollouts: SlowRollouts) -> None:
    """Before, the loop answered only between phases: a stop asked during a long phase timed out."""
    tick = ticking(loop)
    wait_for(lambda: sum(rollouts.started.values()) >= 1)
    t0 = time.monotonic()
    answered = control.request(store, "stop_after_iteration", timeout_s=5)
    assert time.monotonic() - t0 < 1.5
    assert answered.status == ControlStatus.DONE
    assert tick.is_alive()  # answered by the steering thread, not at the end of the phase
    tick.join(timeout=30)


def test_no_live_loop_is_said_at_once_and_nothing_is_queued(settings: Settings, store: Store) -> None:
    settings.loop.families = ["files"]
    loop = make_loop(settings, store)  # a loop that was never started keeps no heartbeat
    t0 = time.monotonic()
    with pytest.raises(ControlError, match="no loop is running run .* no `appliance run` keeps a heartbeat") as e:
        control.request(store, "pause", timeout_s=15)
    assert time.monotonic() - t0 < 1.0  # decided from the heartbeat, not from the timeout
    assert "appliance run" in e.value.hint
    assert store.pending_controls(loop.run.id) == []
    steering = loop.start_steering(interval_s=BEAT)
    steering.stop()  # the loop ended: its heartbeat goes with it
    with pytest.raises(ControlError, match="no loop is running"):
        control.request(store, "pause")
    assert store.pending_controls(loop.run.id) == []


def test_a_request_left_pending_is_withdrawn_when_a_loop_starts(settings: Settings, store: Store) -> None:
    settings.loop.families = ["files"]
    loop = make_loop(settings, store)
    left = store.request_control(loop.run.id, ControlCommand.PAUSE)  # e.g. a loop died before answering
    steering = loop.start_steering(interval_s=BEAT)
    try:
        assert store.get_control(left.id).status == ControlStatus.EXPIRED
        time.sleep(5 * BEAT)
        assert store.get_run(loop.run.id).status == RunStatus.RUNNING  # not acted on late
    finally:
        steering.stop()


def test_pause_holds_new_rollouts_and_resume_goes_on_from_there(loop: Loop, store: Store,
                                                                 rollouts: SlowRollouts) -> None:
    run_id = loop.run.id
    tick = ticking(loop)
    wait_for(lambda: finished(store, run_id) >= 2)
    t0 = time.monotonic()
    answered = control.request(store, "pause", timeout_s=5)
    assert time.monotonic() - t0 < 1.5
    assert answered.result is not None and answered.result.startswith("pausing: no new rollouts start; ")
    assert answered.result.endswith(" in flight finish")
    assert store.get_run(run_id).status == RunStatus.PAUSED
    # those in flight finish and are recorded; no new one starts while paused
    wait_for(lambda: not any(r.status == RolloutStatus.RUNNING for r in store.rollouts(run_id, iteration=0)))
    held = sum(rollouts.started.values())
    time.sleep(1.0)  # three rollouts' time
    assert sum(rollouts.started.values()) == held < N
    assert finished(store, run_id) == held
    assert tick.is_alive()  # the phase waits at its safe point: nothing to redo on resume
    resumed = control.request(store, "resume", timeout_s=5)
    assert resumed.result == "running"
    tick.join(timeout=30)
    assert not tick.is_alive()
    assert finished(store, run_id) == N
    assert set(rollouts.started.values()) == {1}  # every rollout ran once
    assert loop.phases.ran == [] and store.iterations(run_id)[0].phase == Phase.DIAGNOSE  # the phase ended


def test_stop_now_stops_at_the_next_safe_point_and_the_run_continues(settings: Settings, loop: Loop,
                                                                      store: Store, rollouts: SlowRollouts) -> None:
    run_id = loop.run.id
    tick = ticking(loop)
    wait_for(lambda: finished(store, run_id) >= 2)
    ended = threading.Event()
    loop.on_stop_now = ended.set  # `appliance run` ends by SIGTERM's path
    answered = control.request(store, "stop_now", timeout_s=5)
    assert ended.is_set()
    assert answered.result is not None and answered.result.startswith("stopping: no new rollouts start; ")
    tick.join(timeout=30)
    assert not tick.is_alive()  # the phase returned: what was in flight finished, nothing new started
    assert store.get_run(run_id).status == RunStatus.STOPPED and loop.finished()  # `appliance run` ends
    done = finished(store, run_id)
    assert 2 <= done < N and sum(rollouts.started.values()) == done
    assert not any(r.status == RolloutStatus.RUNNING for r in store.rollouts(run_id, iteration=0))
    assert store.iterations(run_id)[0].phase == Phase.EVALUATE  # it goes on there

    again = make_loop(settings, store)  # `appliance run` again: the same run, from there
    assert again.run.id == run_id and store.get_run(run_id).status == RunStatus.RUNNING
    assert again.tick() is True
    assert finished(store, run_id) == N
    assert set(rollouts.started.values()) == {1}  # no rollout recorded twice



def test_status_shows_the_phase_in_flight(settings: Settings, loop: Loop, store: Store,
                                          rollouts: SlowRollouts) -> None:
    run_id = loop.run.id
    tick = ticking(loop)
    wait_for(lambda: finished(store, run_id) >= 2)
    control.request(store, "pause", timeout_s=5)
    wait_for(lambda: (read_status(settings)["loop"] or {}).get("progress", {}).get("in_flight") == 0)
    status = read_status(settings)["loop"]
    assert status["alive"] is True and status["run_id"] == run_id
    progress = status["progress"]
    assert (progress["phase"], progress["iteration"], progress["total"]) == ("evaluate", 0, N)
    assert progress["done"] == finished(store, run_id) and progress["elapsed_s"] > 0
    assert progress["left_s"] > 0  # the rest at the pace so far
    assert f"evaluate of iteration 0: {progress['done']}/{N} rollouts done, 0 in flight" in status["line"]
    assert "left for those drawn so far" in status["line"]
    control.request(store, "resume", timeout_s=5)
    tick.join(timeout=30)
    time.sleep(3 * BEAT)
    assert read_status(settings)["loop"]["progress"] is None  # between phases
    assert "between phases" in read_status(settings)["loop"]["line"]


def test_status_says_no_loop_runs_and_names_a_pending_request(settings: Settings, store: Store) -> None:
    settings.loop.families = ["files"]
    loop = make_loop(settings, store)
    store.request_control(loop.run.id, ControlCommand.PAUSE)  # left by a loop that died
    status = read_status(settings)["loop"]
    assert status["alive"] is False and status["progress"] is None
    assert [p["command"] for p in status["pending"]] == ["pause"]
    assert status["line"] == "loop: none running (no `appliance run` keeps a heartbeat in this store); pending: pause"


def test_appliance_run_ends_on_stop_now_and_leaves_no_heartbeat(settings: Settings, store: Store,
                                                                 rollouts: SlowRollouts,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`run_appliance` itself, its services stood in for: `stop --now` ends it by SIGTERM's path, its heartbeat
    goes with it (a request made then hears at once that no loop runs), and no rollout ran twice."""
    import contextlib

    from appliance import app

    settings.loop.iterations, settings.loop.families, settings.loop.tick_s = 1, ["files"], 0.1
    stand_in = SimpleNamespace(stopping=threading.Event(), pool=SimpleNamespace(max_concurrent=2))
    phases = RecordedPhases()
    phases[Phase.EVALUATE] = rollouts_phase(N)
    monkeypatch.setattr(app, "services", lambda *_: contextlib.nullcontext(SimpleNamespace(
        engine=FakeEngine(), practice=stand_in)))
    monkeypatch.setattr(app, "Loop", lambda *a, **k: Loop(*a, **k, phases=phases))
    asked: list[float] = []

    def operator() -> None:  # `appliance stop --now` from another terminal, once rollouts run
        wait_for(lambda: sum(rollouts.started.values()) >= 2)
        control.request(store, "stop_now", timeout_s=5)
        asked.append(time.monotonic())

    threading.Thread(target=operator, daemon=True).start()
    run_id = app.run_appliance(settings, log=lambda _: None)  # the main thread: it sets SIGTERM's handler
    assert asked and time.monotonic() - asked[0] < 10
    assert store.get_run(run_id).status == RunStatus.STOPPED and store.heartbeat() is None
    assert stand_in.stopping.is_set()  # SIGTERM's teardown ran
    assert 2 <= finished(store, run_id) < N and set(rollouts.started.values()) == {1}
    assert control.loop_alive(store, run_id) == (False, "no `appliance run` keeps a heartbeat in this store")


def training_loop(settings: Settings, store: Store, trainer: SlowSteps, steps: int) -> Loop:
    """A real loop whose TRAIN phase is `steps` slow optimizer steps (the other phases only record themselves),
    ticked up to that phase."""
    settings.loop.iterations, settings.loop.families = 1, ["files"]
    phases = RecordedPhases()
    phases[Phase.TRAIN] = training_phase(trainer, steps)
    stand_in = SimpleNamespace(stopping=threading.Event(), pool=SimpleNamespace(max_concurrent=2))
    loop = Loop(settings, store, FakeEngine(), stand_in, log=lambda _: None, phases=phases)  # type: ignore[arg-type]
    while not (store.iterations(loop.run.id) and store.iterations(loop.run.id)[-1].phase == Phase.TRAIN):
        assert loop.tick()
    return loop


def test_pause_holds_the_next_training_step_and_stop_now_keeps_what_was_trained(settings: Settings,
                                                                               store: Store) -> None:
    """Issue 52: a pause asked during TRAIN is answered within a beat with the step it takes effect after, no
    step starts while paused, status counts the steps, and stop --now keeps what was trained: the next
    `appliance run` finishes the phase from there, each step once. Before: TRAIN had no safe point; the
    answer said the phase runs to its end, and a stop threw its training away."""
    trainer = SlowSteps(0.2)
    loop = training_loop(settings, store, trainer, 8)
    run_id = loop.run.id
    steering = loop.start_steering(interval_s=BEAT)
    try:
        tick = ticking(loop)
        wait_for(lambda: sum(trainer.taken.values()) >= 2)
        t0 = time.monotonic()
        answered = control.request(store, "pause", timeout_s=5)
        assert time.monotonic() - t0 < 1.5
        # exact: the safe point counts and reads the controls as one, and the answer reads the count after the
        # pause is recorded ("after step k": k runs to its end; "before step k": the safe point held first)
        said = re.fullmatch(r"pausing: training stops (after|before) step (\d) of 8; the trainer keeps its memory .*",
                            answered.result or "")
        assert said, answered.result
        k = int(said.group(2)) - (said.group(1) == "before")  # the steps taken when it holds
        time.sleep(1.0)  # five steps' time
        assert sum(trainer.taken.values()) == k and tick.is_alive()  # the step in flight ended; none started
        status = read_status(settings)["loop"]
        assert (status["progress"]["steps_done"], status["progress"]["steps_total"]) == (k, 8)
        assert f"train of iteration 1: training step {k}/8 done" in status["line"]
        ended = threading.Event()
        loop.on_stop_now = ended.set
        stopped = control.request(store, "stop_now", timeout_s=5)
        assert stopped.result is not None and stopped.result.startswith(
            f"stopping: training stops before step {k + 1} of 8 and saves what it trained")
        tick.join(timeout=10)
        assert not tick.is_alive() and ended.is_set()
        assert trainer.saved is not None and trainer.saved.done == k  # the midway state the next start reads
        assert [g for g, _ in store.metric_series(run_id, "loss")] == list(range(1, k + 1))
    finally:
        steering.stop()

    again = training_loop(settings, store, trainer, 8)  # `appliance run` again: the same run, from there
    assert again.run.id == run_id
    assert again.tick() is True and trainer.saved is None
    assert sorted(trainer.taken) == [f"part{i}" for i in range(8)] and set(trainer.taken.values()) == {1}
    assert [g for g, _ in store.metric_series(run_id, "loss")] == list(range(1, 9))  # no step twice


def test_appliance_run_waits_for_a_training_phase_to_save_what_it_trained(settings: Settings, store: Store,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop during TRAIN waits for the step in flight and the save of what was trained (minutes on a real
    model) before tearing down; the other phases' short grace would tear down under them and lose it.
    Before: `run_appliance` returned after its 30 s grace (0.1 s here) with nothing saved."""
    import contextlib

    from appliance import app

    settings.loop.iterations, settings.loop.families, settings.loop.tick_s = 1, ["files"], 0.1
    monkeypatch.setattr(app, "STOP_GRACE_S", 0.1)
    trainer = SlowSteps(1.0)
    phases = RecordedPhases()
    phases[Phase.TRAIN] = training_phase(trainer, 4)
    stand_in = SimpleNamespace(stopping=threading.Event(), pool=SimpleNamespace(max_concurrent=2))
    monkeypatch.setattr(app, "services", lambda *_: contextlib.nullcontext(SimpleNamespace(
        engine=FakeEngine(), practice=stand_in)))
    monkeypatch.setattr(app, "Loop", lambda *a, **k: Loop(*a, **k, phases=phases))

    def operator() -> None:  # `appliance stop --now` once the first step is in flight
        wait_for(lambda: sum(trainer.taken.values()) >= 1)
        control.request(store, "stop_now", timeout_s=5)

    threading.Thread(target=operator, daemon=True).start()
    app.run_appliance(settings, log=lambda _: None)
    assert trainer.saved is not None and trainer.saved.parts_done >= 1, "the stop tore down before the save"
