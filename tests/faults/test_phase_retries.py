"""Fault: a phase that raises the same exception at every tick. The run stops after `loop.phase_attempts`
attempts with the cause in its status and events, and a restart continues it once the cause is gone."""

from __future__ import annotations

import time

import pytest

from appliance import scheduler
from appliance.config import Settings
from appliance.config.settings import LoopSettings
from appliance.errors import ApplianceError
from appliance.schemas import IterationStatus, Phase, RunStatus
from appliance.store import Store
from faults.faulty_loop import BASELINE, ITERATION_1, make_loop, ticks


def always(error: BaseException):
    def fault(index: int) -> None:
        raise error
    return fault


def test_a_bug_in_a_phase_stops_the_run_after_the_bounded_attempts(fault_settings: Settings, store: Store) -> None:
    fault_settings.loop.phase_attempts = 3
    loop = make_loop(fault_settings, store)
    loop.phases.faults[Phase.SYNTHESIZE] = always(KeyError("family"))
    ticks(loop, n=2)  # the baseline
    for attempt in (1, 2):
        with pytest.raises(KeyError):
            loop.tick()
        assert store.get_run(loop.run.id).status == RunStatus.RUNNING, f"attempt {attempt}"
    assert loop.tick() is False  # the third attempt: the run is failed, not retried
    run = store.get_run(loop.run.id)
    assert run.status == RunStatus.FAILED and loop.finished()
    it = store.iterations(loop.run.id)[1]
    assert (it.phase, it.status, it.error) == (Phase.SYNTHESIZE, IterationStatus.FAILED, "KeyError: 'family'")
    errors = [e.message for e in store.events(loop.run.id) if e.kind == "error"]
    assert errors == [f"iteration 1 synthesize failed: KeyError: 'family' (attempt {n} of 3)" for n in (1, 2, 3)]
    [stopped] = [e.message for e in store.events(loop.run.id) if e.kind == "run" and "failed" in e.message]
    assert "synthesize failed 3 times in a row, last with KeyError: 'family'" in stopped
    assert "`appliance run` continues the run" in stopped
    assert loop.tick() is False and loop.phases.ran == BASELINE  # no fourth attempt

    # the cause fixed, a restart continues the same run with fresh attempts and loses nothing
    again = make_loop(fault_settings, store)
    assert again.run.id == loop.run.id and store.get_run(loop.run.id).status == RunStatus.RUNNING
    ticks(again)
    assert again.phases.ran == ITERATION_1 and store.get_run(loop.run.id).status == RunStatus.DONE
    assert [(i.index, i.status) for i in store.iterations(loop.run.id)] == [(0, IterationStatus.DONE),
                                                                           (1, IterationStatus.DONE)]


def test_a_success_resets_the_count(fault_settings: Settings, store: Store) -> None:
    """Failures in a row of one phase count; one that passes on its second attempt leaves the next a full set."""
    fault_settings.loop.phase_attempts = 2
    loop = make_loop(fault_settings, store)
    once = {Phase.EVALUATE: 1, Phase.DIAGNOSE: 1}

    def flaky(phase: Phase):
        def fault(index: int) -> None:
            if once[phase]:
                once[phase] -= 1
                raise ApplianceError(f"{phase} flaked", "it passes next time")
        return fault

    loop.phases.faults = {p: flaky(p) for p in once}
    for _ in range(2):
        with pytest.raises(ApplianceError):
            loop.tick()
        assert loop.tick() is True
    assert loop.phases.ran == BASELINE and store.get_run(loop.run.id).status == RunStatus.RUNNING


def test_the_scheduler_stops_retrying(fault_settings: Settings, store: Store) -> None:
    """Through the real scheduler at a fast tick: exactly phase_attempts attempts, then the run is failed and
    `run_appliance`'s wait (loop.finished) ends."""
    fault_settings.loop.phase_attempts = 3
    fault_settings.loop.tick_s = 0.05
    loop = make_loop(fault_settings, store)
    attempts: list[float] = []

    def fault(index: int) -> None:
        attempts.append(time.monotonic())
        raise ApplianceError("the engine does not answer", "look at logs/engine.log")

    loop.phases.faults[Phase.EVALUATE] = fault
    sched = scheduler.start(loop)
    try:
        deadline = time.monotonic() + 30
        while not loop.finished() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # ten more triggers: none may attempt again
    finally:
        sched.shutdown(wait=True)
    assert loop.finished() and store.get_run(loop.run.id).status == RunStatus.FAILED
    assert len(attempts) == 3
    [stopped] = [e for e in store.events(loop.run.id) if e.kind == "run" and "failed" in e.message]
    assert "last with the engine does not answer" in stopped.message and "logs/engine.log" in stopped.message


def test_the_bound_is_a_setting_with_help() -> None:
    field = LoopSettings.model_fields["phase_attempts"]
    assert field.default == 3 and field.description and "appliance run" in field.description
