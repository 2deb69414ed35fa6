"""A phase cut short by the shutdown is an interruption, not a failed attempt (issues 49 and 52).

The shutdown (SIGTERM, Ctrl-C, `appliance stop --now`) sets `practice.stopping` (or the context's
`stop_now`) first, then tears the engine down under whatever request is still in flight. What that request
raises then (httpx's RemoteProtocolError, a ConnectError, a 5xx) is the shutdown's doing: counting it as
one of `loop.phase_attempts` failed a run after a few stops, which `appliance run` is meant to continue.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import httpx
import pytest

from appliance.config import Settings
from appliance.loop import Loop
from appliance.phases.synthesize import synthesize
from appliance.schemas import IterationStatus, Phase, RunStatus
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.testing.phases import RecordedPhases


def stopped_under(stop: Callable[[], None]) -> Callable[..., str]:
    """A policy whose request is in flight when the shutdown begins: `stop()` runs as the request waits, then
    the engine goes away under it, as `appliance run`'s teardown stops it."""
    def generate(prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        stop()
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
    return generate


def loop_at_synthesize(settings: Settings, store: Store, generate: Callable[..., str]) -> Loop:
    """A loop whose baseline is done (recorded phases) and whose next phase is the real SYNTHESIZE."""
    settings.loop.iterations, settings.loop.families, settings.loop.propose = 1, ["files"], 2
    settings.loop.phase_attempts = 1  # one counted failure would fail the run at once
    practice = SimpleNamespace(stopping=threading.Event())
    phases = RecordedPhases()
    loop = Loop(settings, store, FakeEngine(), practice, log=lambda _: None,  # type: ignore[arg-type]
                phases=phases, generate_text=generate)
    store.beat(loop.run.id, os.getpid(), time.time(), None)
    assert loop.tick() and loop.tick()  # the baseline's EVALUATE and DIAGNOSE
    phases[Phase.SYNTHESIZE] = synthesize
    return loop


@pytest.mark.parametrize("how", ["sigterm", "stop_now"])
def test_a_proposal_request_the_shutdown_broke_is_no_failed_attempt(settings: Settings, store: Store,
                                                                     how: str) -> None:
    box: list[Loop] = []

    def stop() -> None:  # as `appliance run`'s SIGTERM path, or the steering thread on `stop --now`, does
        loop = box[0]
        (loop.practice.stopping if how == "sigterm" else loop.context.stop_now).set()

    loop = loop_at_synthesize(settings, store, stopped_under(stop))
    box.append(loop)
    assert loop.tick() is False  # interrupted: nothing raised, nothing counted
    run_id = loop.run.id
    assert store.get_run(run_id).status == RunStatus.RUNNING
    it = store.iterations(run_id)[1]
    assert (it.phase, it.status) == (Phase.SYNTHESIZE, IterationStatus.RUNNING)
    events = store.events(run_id)
    assert not [e for e in events if e.kind == "error"], [e.message for e in events if e.kind == "error"]
    assert any("synthesize interrupted" in e.message and "RemoteProtocolError" in e.message for e in events)
    assert loop.attempts.count == 0


def test_the_same_error_without_a_shutdown_is_a_failed_attempt(settings: Settings, store: Store) -> None:
    loop = loop_at_synthesize(settings, store, stopped_under(lambda: None))
    assert loop.tick() is False  # its last attempt (phase_attempts = 1): the run failed
    assert store.get_run(loop.run.id).status == RunStatus.FAILED
    assert any(e.kind == "error" and "RemoteProtocolError" in e.message for e in store.events(loop.run.id))
