"""The control channel: requests, the loop's answers, and the errors a person sees."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from appliance import control
from appliance.cli import main
from appliance.control import ControlError
from appliance.schemas import ControlCommand, ControlStatus, RunStatus
from appliance.store import Store
from appliance.testing import ControlConsumer


def test_no_run_is_a_clear_error(store: Store) -> None:
    with pytest.raises(ControlError, match="no run to control") as e:
        control.request(store, "pause")
    assert "appliance run" in e.value.hint


def test_unknown_command_lists_the_choices(store: Store) -> None:
    store.create_run("r", {})
    with pytest.raises(ControlError, match="unknown control command") as e:
        control.request(store, "explode")
    assert "stop_after_iteration" in e.value.hint


def test_command_not_allowed_in_this_state(store: Store) -> None:
    store.create_run("r", {})
    with pytest.raises(ControlError, match="cannot resume run 'r': it is running"):
        control.request(store, ControlCommand.RESUME)
    assert store.pending_controls("r") == []


def test_pause_is_answered_by_the_loop(store: Store) -> None:
    store.create_run("r", {})
    store.start_iteration("r", 0, policy_version=0)
    consumer = ControlConsumer(store, "r")
    # the consumer answers between the request and the first poll, as a loop in another process would
    answered = control.request(store, "pause", sleep=lambda _: consumer.poll_once())
    assert answered.status == ControlStatus.DONE and answered.result == "paused"
    assert store.get_run("r").status == RunStatus.PAUSED
    stepped = control.request(store, "step", sleep=lambda _: consumer.poll_once())
    assert stepped.result == control.ANSWERS[ControlCommand.STEP]
    assert store.iterations("r")[0].phase == "validate"  # the stand-in ran its phase at once
    assert store.get_run("r").status == RunStatus.PAUSED


def test_a_loop_that_dies_while_asked_has_the_request_withdrawn(store: Store) -> None:
    store.create_run("r", {})
    ControlConsumer(store, "r")  # alive when asked (one beat), then it never answers nor beats again

    def die(_: float) -> None:  # the heartbeat goes stale while the requester waits
        store.conn.execute("UPDATE heartbeat SET beat_at = beat_at - ?", (control.LIVE_S + 1,))

    with pytest.raises(ControlError, match="no loop answered .* heartbeat .* old") as e:
        control.request(store, "pause", timeout_s=15, poll_s=0.01, sleep=die)
    assert "appliance run" in e.value.hint and "withdrawn" in e.value.hint
    (expired,) = store.controls("r")
    assert expired.status == ControlStatus.EXPIRED
    assert store.pending_controls("r") == []
    # a loop that wakes up later cannot act on the withdrawn request
    assert store.ack_control(expired.id, "paused") is False


def test_no_live_loop_queues_nothing(store: Store) -> None:
    store.create_run("r", {})
    with pytest.raises(ControlError, match="no loop is running run 'r'") as e:
        control.request(store, "pause", timeout_s=0.05, poll_s=0.01)
    assert "appliance run" in e.value.hint
    assert store.controls("r") == []


def test_refusal_is_reported(store: Store) -> None:
    store.create_run("r", {})
    ControlConsumer(store, "r")  # a live heartbeat; the answers come from `refuse`

    def refuse(_: float) -> None:
        for c in store.pending_controls("r"):
            store.ack_control(c.id, "the engine is syncing weights", status=ControlStatus.REFUSED)

    with pytest.raises(ControlError, match="refused pause: the engine is syncing weights"):
        control.request(store, "pause", sleep=refuse)


def test_cli_pause_without_a_run(settings, store: Store) -> None:
    result = CliRunner().invoke(main, ["pause"], env={"APPLIANCE_HOME": str(settings.home)})
    assert result.exit_code == 1
    assert "no run to control" in result.output and "hint" in result.output


def test_cli_stop_no_wait_queues_the_request(settings, store: Store) -> None:
    store.create_run("r", {})
    ControlConsumer(store, "r")  # a live loop to queue it for
    result = CliRunner().invoke(main, ["stop", "--no-wait", "--json"], env={"APPLIANCE_HOME": str(settings.home)})
    assert result.exit_code == 0, result.output
    assert '"command": "stop_after_iteration"' in result.output
    assert [c.command for c in store.pending_controls("r")] == [ControlCommand.STOP_AFTER_ITERATION]


def test_cli_stop_now_is_answered_by_the_live_loop(settings, store: Store) -> None:
    store.create_run("r", {})
    consumer = ControlConsumer(store, "r")
    done = consumer.run_in_thread(interval_s=0.02)
    try:
        result = CliRunner().invoke(main, ["stop", "--now"], env={"APPLIANCE_HOME": str(settings.home)})
    finally:
        done.set()
    assert result.exit_code == 0, result.output
    assert "stop_now run r: done" in result.output
    assert consumer.stopped_now and store.get_run("r").status == RunStatus.STOPPED


def test_cli_stop_without_a_live_loop_says_so_at_once(settings, store: Store) -> None:
    store.create_run("r", {})
    result = CliRunner().invoke(main, ["stop", "--now", "--timeout", "60"], env={"APPLIANCE_HOME": str(settings.home)})
    assert result.exit_code == 1
    assert "no loop is running run 'r'" in result.output and "appliance run" in result.output
    assert store.controls("r") == []


def test_a_late_beat_of_the_process_holding_the_loop_lock_is_a_live_loop(store: Store) -> None:
    """A beat held up past LIVE_S (a write waits up to 30 s for a busy store) made a live loop look dead: a
    request was refused with "no loop is running" while the loop ran. Its process still holding the loop lock
    says it lives; a late beat of a process that does not hold it (killed, or another's) is still no loop."""
    import time

    store.create_run("r", {})
    store.beat("r", os.getpid(), started_at=time.time() - 60, progress=None)
    late = time.time() + control.LIVE_S + 20
    assert control.loop_alive(store, "r", at=late)[0] is False  # no process holds the lock
    with store.loop_lock():
        assert store.loop_holder() == os.getpid()
        assert control.loop_alive(store, "r", at=late) == (True, "")
        store.beat("r", os.getpid() + 1, started_at=time.time(), progress=None)  # another pid's beat, late
        alive, why = control.loop_alive(store, "r", at=late)
        assert not alive and "s old" in why
    assert store.loop_holder() is None


def test_the_heartbeat_survives_a_failing_beat_and_says_so_once(store: Store) -> None:
    import time

    from appliance.errors import StoreBusy

    store.create_run("r", {})
    calls, logged = [], []

    def answer() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise StoreBusy("the store is busy", "wait")

    steering = control.Steering(store, "r", answer, lambda: None, interval_s=0.01, log=logged.append).start()
    try:
        deadline = time.monotonic() + 5
        while len(calls) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        steering.stop()
    assert len(calls) >= 6  # the thread went on after the failures
    assert logged == ["the loop's heartbeat missed a beat (the store is busy); it tries again every 0.01 s"]
    assert store.heartbeat() is None  # stopped: the heartbeat goes with the loop


def test_the_answer_says_when_a_pause_or_stop_takes_effect() -> None:
    rollouts = {"phase": "evaluate", "in_flight": 3, "stage": ""}
    assert control.phase_answer(ControlCommand.PAUSE, None) is None  # between phases: ANSWERS
    assert control.phase_answer(ControlCommand.PAUSE, rollouts) == "pausing: no new rollouts start; 3 in flight finish"
    validating = {**rollouts, "in_flight": 0, "stage": "validating 40 tasks"}
    assert control.phase_answer(ControlCommand.PAUSE, validating) == (
        "pausing: validating 40 tasks in the evaluate phase runs to its end first, then no new rollouts start")
    synthesizing = {"phase": "synthesize", "in_flight": 0, "stage": ""}
    assert control.phase_answer(ControlCommand.PAUSE, synthesizing) == (
        "pausing: the synthesize phase in flight has no safe point inside; it runs to its end first")
    assert control.phase_answer(ControlCommand.STOP_NOW, synthesizing).startswith(
        "stopping: the synthesize phase in flight stops at its next check, as on SIGTERM; `appliance run` then ends")


def test_the_answer_in_a_training_phase_names_the_step_it_stops_after() -> None:
    training = {"phase": "train", "in_flight": 0, "stage": "", "steps_done": 2, "steps_total": 8}
    assert control.phase_answer(ControlCommand.PAUSE, training) == (
        "pausing: training stops after step 3 of 8; the trainer keeps its memory (the GPU) while paused: "
        "`appliance stop --now` saves what it trained and frees the machine")
    assert control.phase_answer(ControlCommand.STOP_NOW, training) == (
        "stopping: training stops after step 3 of 8 and saves what it trained; `appliance run` then ends, and "
        "continues the run when run again")
    assert control.phase_answer(ControlCommand.STOP_NOW, training, paused=True).startswith(
        "stopping: training stops before step 3 of 8 and saves what it trained")
    preparing = {**training, "steps_done": 0, "steps_total": 0}
    assert control.phase_answer(ControlCommand.PAUSE, preparing).startswith(
        "pausing: training stops before its first step;")
    saving = {**training, "steps_done": 8}
    assert control.phase_answer(ControlCommand.PAUSE, saving) == (
        "pausing: training took its last step (8 of 8); saving and syncing the weights run to their end first")


def test_a_control_command_opens_the_store_without_importing_pandas():
    # sqlite_utils imported pandas for every command that opens the store: 4 to 5 s of `appliance pause`'s
    # wall time while a loop trained on 2 cores (issue 52). A later import of pandas still works.
    code = ("import sys, appliance.cli, appliance.control, appliance.store; "
            "print('pandas' in sys.modules); import pandas; print(pandas.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "pandas"]
