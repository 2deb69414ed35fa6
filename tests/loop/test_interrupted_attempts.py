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


@pytest.mark.parametrize("shutdown", [True, False])
def test_any_phase_that_fails_once_the_shutdown_began_is_interrupted(settings: Settings, store: Store,
                                                                     shutdown: bool) -> None:
    """The loop's own rule, whatever the phase: what it raised after `practice.stopping` was set is the
    shutdown's; the same error with no shutdown is a failed attempt (here the last: the run fails)."""
    settings.loop.iterations, settings.loop.families, settings.loop.phase_attempts = 1, ["files"], 1
    practice = SimpleNamespace(stopping=threading.Event())
    phases = RecordedPhases()
    loop = Loop(settings, store, FakeEngine(), practice, log=lambda _: None, phases=phases)  # type: ignore[arg-type]

    def engine_stopped_under_it(_index: int) -> None:
        if shutdown:
            practice.stopping.set()
        raise httpx.ConnectError("[Errno 111] Connection refused")

    phases.faults[Phase.EVALUATE] = engine_stopped_under_it
    assert loop.tick() is False
    errors = [e.message for e in store.events(loop.run.id) if e.kind == "error"]
    if shutdown:
        assert store.get_run(loop.run.id).status == RunStatus.RUNNING and loop.attempts.count == 0
        assert not errors and store.iterations(loop.run.id)[0].status == IterationStatus.RUNNING
    else:
        assert store.get_run(loop.run.id).status == RunStatus.FAILED
        assert errors and "ConnectError" in errors[0]


def test_proposal_requests_the_engine_did_not_answer_leave_synthesize_done(settings: Settings, store: Store) -> None:
    """Self-proposal is an extra: a request that timed out (the bundled model's round of 8 x 512 tokens outlasted
    the 300 s request timeout) is a proposal that did not parse, not SYNTHESIZE's failure, which retried the
    whole round and failed the run after `loop.phase_attempts` of them."""
    answer = ("INSTRUCTION\n```text\nWrite hi into a.txt.\n```\nVERIFY\n```bash\ngrep -qx hi a.txt\n```\n"
              "SOLUTION\n```bash\necho hi > a.txt\n```\n")
    calls: list[int] = []

    def slow_engine(prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ReadTimeout("timed out")
        return answer

    loop = loop_at_synthesize(settings, store, slow_engine)
    assert loop.tick() is True
    run_id = loop.run.id
    assert store.get_run(run_id).status == RunStatus.RUNNING
    assert store.iterations(run_id)[1].phase == Phase.VALIDATE
    assert len(calls) == 2 and any(t.source == "self_proposed" for t in store.tasks(run_id))
    said = [e.message for e in store.events(run_id) if e.kind == "synthesize"]
    assert any("1 of 2 proposal requests got no answer (ReadTimeout: timed out)" in m for m in said), said


def test_an_analysis_the_shutdown_broke_leaves_diagnose_to_be_redone(settings: Settings, store: Store) -> None:
    """The report's analysis swallowed any failed request ("(no analysis: ...)") and DIAGNOSE was saved, done:
    a shutdown under that request left the report without the analysis it would have had, for good."""
    from appliance.phases.diagnose import diagnose

    settings.loop.iterations, settings.loop.families, settings.loop.analysis = 1, ["files"], True
    practice = SimpleNamespace(stopping=threading.Event())
    phases = RecordedPhases()
    loop = Loop(settings, store, FakeEngine(), practice, log=lambda _: None,  # type: ignore[arg-type]
                phases=phases, generate_text=stopped_under(practice.stopping.set))
    store.beat(loop.run.id, os.getpid(), time.time(), None)
    assert loop.tick()  # the baseline's EVALUATE (recorded)
    phases[Phase.DIAGNOSE] = diagnose
    assert loop.tick() is False  # interrupted
    run_id = loop.run.id
    it = store.iterations(run_id)[0]
    assert (it.phase, it.status) == (Phase.DIAGNOSE, IterationStatus.RUNNING)
    assert store.get_run(run_id).status == RunStatus.RUNNING and loop.attempts.count == 0
    assert store.report(run_id, 0) is None
