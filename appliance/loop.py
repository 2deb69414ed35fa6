"""The loop's reconciler: the run, its iterations and their phases, resumable at any moment.

`Loop.tick()` reads the store, runs the current iteration's next due phase through `phases.PHASE_TABLE`
and returns: a crash at any moment is an early return, and the next tick (in this process or after a
restart) redoes only what the store does not show as done, because each phase is idempotent
(`appliance.phases`). The engine restores the weights the store says it served, so a restart serves the
right policy. A phase's failure uses up one of `loop.phase_attempts` (`appliance.attempts`).

Controls are answered by the steering thread (`start_steering`: a heartbeat about every second, whatever
phase runs) and at each tick (`appliance.control`); they take effect between phases, before each
rollout starts (`PhaseContext.safe_point`) and before each training step (`phases.train.steer`): a pause
holds new rollouts (or the next step) back, a stop now starts none (and saves the training done so far).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from appliance.attempts import Attempts, describe
from appliance.config import Settings
from appliance.control import BEAT_S, Steering, answer_pending, phase_answer
from appliance.demonstrations import ChatTokenizer
from appliance.errors import Interrupted, StoreBusy
from appliance.phases import BASELINE_PHASES, PHASE_TABLE, PHASES, GenerateText, PhaseContext, PhaseFn
from appliance.phases.context import PhaseProgress
from appliance.phases.practise import in_training_window, no_time_to_train
from appliance.practice import Practice
from appliance.schemas import ControlCommand, ControlStatus, Event, IterationStatus, Phase, Run, RunStatus, Split
from appliance.seams import Engine
from appliance.store import Store
from appliance.tasks.families import FAMILIES
from appliance.tasks.heldout import heldout_tasks


@dataclass
class Loop:
    settings: Settings
    store: Store
    engine: Engine
    practice: Practice
    log: Callable[[str], None] = print
    chat_tokenizer: ChatTokenizer | None = None  # demonstrations' tokenizer; None = the served model's
    generate_text: GenerateText | None = None  # the policy writing text (`serving.policy_text`); None: none
    phases: Mapping[Phase, PhaseFn] = field(default_factory=lambda: PHASE_TABLE)
    step_pending: bool = field(default=False, init=False)  # a `step` answered while paused: one phase runs
    stop_after: bool = field(default=False, init=False)  # a `stop-after-iteration` answered in this process
    in_phase: bool = field(default=False, init=False)  # a phase is in flight (its progress is the context's)

    def __post_init__(self) -> None:
        self._answering = threading.Lock()  # the steering thread and a tick answer one request once
        self.on_stop_now: Callable[[], None] | None = None
        self.families = self.settings.loop.families or list(FAMILIES)
        self.attempts = Attempts(self.settings.loop.phase_attempts)
        self.run = self.ensure_run()
        self.context = PhaseContext(self.settings, self.store, self.run.id, self.engine, self.practice,
                                    self.families, self.log, self.generate_text, self.chat_tokenizer,
                                    held=self._held)

    def ensure_run(self) -> Run:
        """Continue the latest unfinished run, or start a new one with its held-out set fixed."""
        run = self.store.latest_run()
        lineage = self.store.current_lineage()
        other_lineage = run is not None and lineage is not None and self.store.run_lineage(run.id) != lineage["id"]
        if run is None or run.status == RunStatus.DONE or other_lineage:  # a run never spans two base models
            run_id = "run-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            run = self.store.create_run(run_id, {"profile": self.settings.profile,
                                                 "iterations": self.settings.loop.iterations})
            self.event(run.id, "run", f"started run {run_id}")
        elif run.status in (RunStatus.STOPPED, RunStatus.FAILED):
            self.store.set_run_status(run.id, RunStatus.RUNNING)
            self.event(run.id, "run", f"continuing run {run.id} (was {run.status})")
        if not self.store.tasks(run.id, split=Split.HELDOUT):
            lp = self.settings.loop
            specs = heldout_tasks(self.families, lp.heldout_levels, lp.heldout_per_cell, seed_base=run.id)
            for spec in specs:
                self.store.add_task(spec.task_row(run.id, Split.HELDOUT))
            self.event(run.id, "heldout", f"held-out set fixed: {len(specs)} tasks")
        return self.store.get_run(run.id)

    def event(self, run_id: str, kind: str, message: str, duration_s: float | None = None, **data: object) -> None:
        self.store.add_event(Event(kind, message, run_id, dict(data), duration_s))
        self.log(message)

    def finished(self) -> bool:
        return self.store.get_run(self.run.id).status in (RunStatus.DONE, RunStatus.STOPPED, RunStatus.FAILED)

    def tick(self) -> bool:
        """Advance the run by one phase; False when there was nothing to do (paused, done, outside window), the
        store was busy (nothing written; the next tick retries) or the phase failed its last attempt."""
        try:
            return self._tick()
        except StoreBusy as e:
            self.log(f"the loop waits: {e.message} ({e.hint})")
            return False

    def start_steering(self, interval_s: float = BEAT_S, on_stop_now: Callable[[], None] | None = None) -> Steering:
        """The heartbeat and the answering, in a thread of this process; `stop()` it when the loop ends.
        `on_stop_now`: what ends the process on `appliance stop --now` (`appliance run`: SIGTERM's path)."""
        self.on_stop_now = on_stop_now
        return Steering(self.store, self.run.id, self.answer_controls, self.progress, interval_s=interval_s,
                        log=self.log).start()

    def answer_controls(self) -> None:
        with self._answering:
            for answered in answer_pending(self.store, self.run.id, step=self._request_step,
                                          stop_after_iteration=self._request_stop, pause=self._pausing,
                                          stop_now=self._stopping_now):
                self.event(self.run.id, "control", f"{answered.command}: {answered.result}")

    def progress(self) -> dict[str, object] | None:
        """The phase in flight's progress (None between phases), for the heartbeat."""
        return self.context.progress.as_dict() if self.in_phase else None

    def _tick(self) -> bool:
        self.answer_controls()
        run = self.store.get_run(self.run.id)
        if run.status != RunStatus.RUNNING and not (run.status == RunStatus.PAUSED and self.step_pending):
            return False
        iterations = self.store.iterations(run.id)
        current = next((it for it in iterations if it.status != IterationStatus.DONE), None)
        if current is None:
            done = len(iterations) - 1  # iteration 0 is the baseline
            late = done >= 0 and no_time_to_train(self.settings, self.store, run.id)
            if done >= self.settings.loop.iterations or self._stop_requested() or late:
                word = "stopped" if self._stop_requested() else "done"
                self.store.set_run_status(run.id, RunStatus.STOPPED if word == "stopped" else RunStatus.DONE)
                why = " (loop.deadline leaves no time for another iteration's practice and LEARN)" if late else ""
                self.event(run.id, "run", f"run {run.id} {word} after {done} iterations{why}")
                return False
            current = self.store.start_iteration(run.id, len(iterations), self.engine.policy_version)
            current.phase = BASELINE_PHASES[0] if current.index == 0 else PHASES[0]
            self.store.set_iteration_phase(run.id, current.index, current.phase)
        if current.status == IterationStatus.FAILED:
            self.store.set_iteration_status(run.id, current.index, IterationStatus.RUNNING)
        window = self.settings.loop.training_window
        if current.phase in (Phase.PRACTISE, Phase.TRAIN) and not in_training_window(window):
            return False
        order = BASELINE_PHASES if current.index == 0 else PHASES
        where: dict[str, object] = {"iteration": current.index, "phase": str(current.phase)}
        self.store.add_event(Event("phase", str(current.phase), run.id, {"iteration": current.index}))
        t0 = time.monotonic()
        self.context.progress = PhaseProgress(str(current.phase), current.index)
        self.in_phase = True
        try:
            self.phases[current.phase](self.context, current.index)
        except StoreBusy:
            raise  # not the phase's failure, and nothing can be recorded: `tick` waits for the store
        except Exception as e:  # a bug uses up an attempt as an ApplianceError does; a shutdown's does not:
            # what the teardown broke under the phase (the engine stopped under a request) is an interruption
            if isinstance(e, Interrupted) or self.practice.stopping.is_set() or self.context.stop_now.is_set():
                cause = e if isinstance(e, Interrupted) else f"the shutdown broke it: {describe(e)}"
                self.event(run.id, "info", f"iteration {current.index}: {current.phase} interrupted ({cause}); it "
                                           "goes on at the next start", None, **where)
                return False
            if self.attempts.failed(self.store, run.id, current.index, str(current.phase), e, self.log):
                return False
            raise
        finally:
            self.in_phase = False
        self.attempts.succeeded()
        self.event(run.id, "info", f"iteration {current.index}: {current.phase} done", time.monotonic() - t0, **where)
        nxt = order.index(current.phase) + 1
        self.store.set_iteration_phase(run.id, current.index, order[nxt] if nxt < len(order) else Phase.DONE)
        if nxt == len(order):
            self.store.set_iteration_status(run.id, current.index, IterationStatus.DONE)
        self.step_pending = False
        return True

    def _request_step(self) -> None:
        self.step_pending = True

    def _request_stop(self) -> None:
        self.stop_after = True

    def _held(self) -> bool:
        """A pause holds the phase in flight at its next safe point (a step lets it go on to its end)."""
        return not self.step_pending and self.store.get_run(self.run.id).status == RunStatus.PAUSED

    def _pausing(self) -> str | None:
        return phase_answer(ControlCommand.PAUSE, self.progress())

    def _stopping_now(self) -> str | None:
        self.context.stop_now.set()
        if self.on_stop_now is not None:
            self.on_stop_now()
        return phase_answer(ControlCommand.STOP_NOW, self.progress(), paused=self._held())

    def _stop_requested(self) -> bool:
        """A stop-after-iteration answered since this run last (re)started counts, also across a restart."""
        if self.stop_after:
            return True
        since = self.store.get_run(self.run.id).updated_at
        return any(c.command == ControlCommand.STOP_AFTER_ITERATION and c.status == ControlStatus.DONE
                   and (c.acked_at or 0) >= since for c in self.store.controls(self.run.id))
