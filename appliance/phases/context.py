"""What a phase works with: the run's settings, store, engine and practice, declared once for every phase.

The reconciler (`appliance.loop`) builds one `PhaseContext` per run and hands it to the phase the table
names; a test builds its own and calls the phase function directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from appliance.config import Settings
from appliance.demonstrations import ChatTokenizer, chat_tokenizer
from appliance.errors import Interrupted
from appliance.practice import Practice
from appliance.schemas import CapabilityReport, Event, Split, Task, TaskStatus
from appliance.seams import Engine, PolicyText
from appliance.store import Store

GenerateText = PolicyText  # the policy writing text: report analysis, self-proposal
HOLD_POLL_S = 0.2  # how often a rollout held back by a pause looks again


@dataclass
class PhaseProgress:
    """The phase in flight, as `appliance status` shows it (the loop's heartbeat carries it): rollouts done of
    those it has drawn so far (finished before a restart included), those running now, since when; in a
    training phase, its optimizer steps done of its total (those done before a stop midway included)."""

    phase: str = ""
    iteration: int = -1
    started_at: float = field(default_factory=time.time)
    done: int = 0
    total: int = 0
    in_flight: int = 0
    ran: int = 0  # finished in this process: what the estimate of the rest is measured on
    stage: str = ""  # work of the phase without a safe point inside, while it runs ("validating 40 tasks")
    steps_done: int = 0  # training steps (SFT's and GRPO's optimizer steps) done of `steps_total`
    steps_total: int = 0  # 0: not training (yet)
    _steps_from: tuple[float, int] | None = field(default=None, repr=False, compare=False)  # first safe point
    holding: bool = False  # a training phase holds at its safe point (a pause)
    # reentrant: a training safe point updates the steps and reads its word in one hold of it (`checking`)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def add(self, total: int, done: int) -> None:
        with self._lock:
            self.total += total
            self.done += done

    def steps(self, done: int, total: int) -> None:
        """A training step's safe point: `done` of the phase's `total` optimizer steps are done."""
        with self._lock:
            if self._steps_from is None:
                self._steps_from = (time.time(), done)
            self.steps_done, self.steps_total = done, total

    @contextmanager
    def checking(self) -> Iterator[None]:
        """Around a safe point's count and its reading of the controls: an answer that reads the progress
        meanwhile (`as_dict`) waits, so it says exactly whether the next step starts."""
        with self._lock:
            yield

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            at = time.time()
            elapsed = at - self.started_at
            # the rollouts drawn so far at the pace of those run here (concurrency included); None before one
            left = elapsed / self.ran * max(0, self.total - self.done) if self.ran else None
            if self._steps_from is not None and self.steps_done > self._steps_from[1]:
                since, first = self._steps_from  # the steps left at the pace of those taken in this process
                left = (at - since) / (self.steps_done - first) * max(0, self.steps_total - self.steps_done)
            return {"phase": self.phase, "iteration": self.iteration, "started_at": self.started_at,
                    "elapsed_s": round(elapsed, 1), "done": self.done, "total": self.total,
                    "in_flight": self.in_flight, "left_s": None if left is None else round(left, 1),
                    "stage": self.stage, "steps_done": self.steps_done, "steps_total": self.steps_total,
                    "holding": self.holding}

    @contextmanager
    def during(self, stage: str) -> Iterator[None]:
        """Name work without a safe point inside while it runs, so an answer can say it runs to its end."""
        self.stage = stage
        try:
            yield
        finally:
            self.stage = ""

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
        finished = False
        try:
            yield
            finished = True
        finally:
            with self._lock:
                self.in_flight -= 1
                self.done += finished
                self.ran += finished


@dataclass
class PhaseContext:
    settings: Settings
    store: Store
    run_id: str
    engine: Engine
    practice: Practice
    families: list[str]
    log: Callable[[str], None] = print
    generate_text: GenerateText | None = None  # None: no analysis, no self-proposal
    chat_tokenizer: ChatTokenizer | None = None  # demonstrations' tokenizer; None until needed: the served model's
    # the loop's controls at the phase's safe points: `held()` while a pause holds new rollouts back;
    # `stop_now` once `appliance stop --now` asked to start nothing more
    held: Callable[[], bool] = lambda: False
    stop_now: threading.Event = field(default_factory=threading.Event)
    progress: PhaseProgress = field(default_factory=PhaseProgress)

    def event(self, kind: str, message: str, duration_s: float | None = None, **data: object) -> None:
        self.store.add_event(Event(kind, message, self.run_id, dict(data), duration_s))
        self.log(message)

    def tokenizer(self) -> ChatTokenizer:
        if self.chat_tokenizer is None:  # loading the model's tokenizer costs seconds: only when a phase asks
            self.chat_tokenizer = chat_tokenizer(self.settings.model_path)
        return self.chat_tokenizer

    def iteration_tasks(self, index: int, status: TaskStatus | None = None) -> list[Task]:
        return self.store.tasks(self.run_id, split=Split.TRAIN, status=status, iteration=index)

    def previous_report(self, index: int) -> CapabilityReport | None:
        found = self.store.report(self.run_id, index - 1) if index > 0 else None
        return found[0] if found else None

    def levels_after(self, index: int) -> dict[str, int]:
        """Each family's level as the report before iteration `index` left it (`loop.start_level` if none)."""
        levels = (self.previous_report(index) or CapabilityReport()).levels
        return {f: int(levels.get(f, self.settings.loop.start_level)) for f in self.families}

    def check_stopping(self, what: str) -> None:
        """Raise Interrupted when a shutdown began while `what` ran: its failures are the shutdown's."""
        if self.practice.stopping.is_set():
            raise Interrupted(f"{what} ran into the shutdown")

    def safe_point(self, what: str) -> None:
        """Before `what` starts: raise Interrupted on a stop (it does not start; the next start does it),
        wait while a pause holds the phase (what runs meanwhile finishes and is recorded)."""
        while True:
            if self.stop_now.is_set():
                raise Interrupted(f"{what} not started: `appliance stop --now`")
            self.check_stopping(what)
            if not self.held():
                return
            self.stop_now.wait(HOLD_POLL_S)

    @contextmanager
    def rollout_slot(self, rollout_id: str) -> Iterator[None]:
        """Around one rollout (`practice.run_rollouts`): its safe point first, then counted in flight and done."""
        self.safe_point(f"rollout {rollout_id}")
        with self.progress.running():
            yield
