"""The loop: one iteration as resumable phases, run by a reconciler the scheduler calls.

    iteration 0     EVALUATE -> DIAGNOSE                         the base model's held-out pass@1
    iteration i>0   SYNTHESIZE -> VALIDATE -> PRACTISE -> TRAIN -> EVALUATE -> DIAGNOSE -> DONE

`Loop.tick()` reads the store, runs the next due phase of the current iteration and returns: a crash at
any moment is an early return, and the next tick (in this process or after a restart) redoes only what
the store does not show as done. Each phase is idempotent: task ids are content hashes, rollout ids are
derived from (run, iteration, task, index), a rollout left `running` by a crash is requeued (its calls
forgotten), training is skipped when the iteration's checkpoint exists, evals and reports are upserts.
The engine restores the weights the store says it served, so a restart serves the right policy.

Controls (pause, resume, step, stop after iteration) are answered at the top of each tick, the loop's
only safe point; `appliance.control` documents the contract.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from appliance.attempts import Attempts
from appliance.config import Settings
from appliance.control import answer_pending
from appliance.curriculum import control, synthesize_round
from appliance.demonstrations import ChatTokenizer, DemoMix, chat_tokenizer, prepare_demonstrations, training_mix
from appliance.diagnosis import build_report, render_markdown
from appliance.errors import ApplianceError, Interrupted, StoreBusy
from appliance.evaluate import evaluate_devset, evaluate_heldout
from appliance.evaluate import learning_curve as learning_curve_with_intervals
from appliance.hindsight import relabel_hindsight
from appliance.practice import Practice, new_rollout, run_rollouts
from appliance.schemas import (
    ControlCommand,
    ControlStatus,
    Event,
    IterationStatus,
    Outcome,
    Phase,
    RolloutStatus,
    Run,
    RunStatus,
    Split,
    Task,
    TaskStatus,
)
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.difficulty import next_levels, split_budget
from appliance.tasks.families import FAMILIES, synthesize
from appliance.tasks.heldout import heldout_tasks
from appliance.tasks.pool import record_band
from appliance.tasks.validate import validate_many
from appliance.training.learn import EngineControl, learn

BASELINE_PHASES = [Phase.EVALUATE, Phase.DIAGNOSE]
PHASES = [Phase.SYNTHESIZE, Phase.VALIDATE, Phase.PRACTISE, Phase.TRAIN, Phase.EVALUATE, Phase.DIAGNOSE]


class Engine(EngineControl, Protocol):
    """What the loop needs from the engine beyond training: its URL and the name requests use."""

    base_url: str

    def model_name(self) -> str: ...


@dataclass
class Loop:
    settings: Settings
    store: Store
    engine: Engine
    practice: Practice
    log: Callable[[str], None] = print
    chat_tokenizer: ChatTokenizer | None = None  # demonstrations' tokenizer; None = the served model's

    def __post_init__(self) -> None:
        self.families = self.settings.loop.families or list(FAMILIES)
        self.run = self.ensure_run()
        self._step_pending = False
        self.attempts = Attempts(self.settings.loop.phase_attempts)

    # --- the run --------------------------------------------------------------------------------
    def ensure_run(self) -> Run:
        """Continue the latest unfinished run, or start a new one with its held-out set fixed."""
        run = self.store.latest_run()
        lineage = self.store.current_lineage()
        other_lineage = run is not None and lineage is not None and self.store.run_lineage(run.id) != lineage["id"]
        if run is None or run.status == RunStatus.DONE or other_lineage:  # a run never spans two base models
            run_id = "run-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            run = self.store.create_run(run_id, {"profile": self.settings.profile,
                                                 "iterations": self.settings.loop.iterations})
            self.event("run", f"started run {run_id}")
        elif run.status in (RunStatus.STOPPED, RunStatus.FAILED):
            self.store.set_run_status(run.id, RunStatus.RUNNING)
            self.event("run", f"continuing run {run.id} (was {run.status})")
        self._fix_heldout(run.id)
        return self.store.get_run(run.id)

    def _fix_heldout(self, run_id: str) -> None:
        if self.store.tasks(run_id, split=Split.HELDOUT):
            return
        lp = self.settings.loop
        specs = heldout_tasks(self.families, lp.heldout_levels, lp.heldout_per_cell, seed_base=run_id)
        for spec in specs:
            self.store.add_task(Task(f"{run_id}.{spec.id}", run_id, spec.family, spec.difficulty, spec.source,
                                     Split.HELDOUT, TaskStatus.PROPOSED, spec.to_spec()))
        self.event("heldout", f"held-out set fixed: {len(specs)} tasks")

    def event(self, kind: str, message: str, duration_s: float | None = None, **data: object) -> None:
        self.store.add_event(Event(kind, message, getattr(self, "run", None) and self.run.id, dict(data), duration_s))
        self.log(message)

    # --- the reconciler ---------------------------------------------------------------------------
    def finished(self) -> bool:
        return self.store.get_run(self.run.id).status in (RunStatus.DONE, RunStatus.STOPPED, RunStatus.FAILED)

    def tick(self) -> bool:
        """Advance the run by one phase; False when there was nothing to do (paused, done, outside window), the
        store was busy (nothing written; the next tick retries) or the phase failed its last attempt."""
        try:
            return self._tick()
        except StoreBusy as e:
            self.log(f"the loop waits: {e.message}")
            return False

    def _tick(self) -> bool:
        self._answer_controls()
        run = self.store.get_run(self.run.id)
        if run.status != RunStatus.RUNNING and not (run.status == RunStatus.PAUSED and self._step_pending):
            return False
        iterations = self.store.iterations(run.id)
        current = next((it for it in iterations if it.status != IterationStatus.DONE), None)
        if current is None:
            done = len(iterations) - 1  # iteration 0 is the baseline
            if done >= self.settings.loop.iterations or self._stop_requested():
                self.store.set_run_status(run.id, RunStatus.STOPPED if self._stop_requested() else RunStatus.DONE)
                self.event("run", f"run {run.id} {'stopped' if self._stop_requested() else 'done'} after {done} iterations")
                return False
            current = self.store.start_iteration(run.id, len(iterations), self.engine.policy_version)
            first = BASELINE_PHASES[0] if current.index == 0 else PHASES[0]
            self.store.set_iteration_phase(run.id, current.index, first)
            current.phase = first
        if current.status == IterationStatus.FAILED:
            self.store.set_iteration_status(run.id, current.index, IterationStatus.RUNNING)
        if current.phase in (Phase.PRACTISE, Phase.TRAIN) and not self._in_window():
            return False
        phases = BASELINE_PHASES if current.index == 0 else PHASES
        self.store.add_event(Event("phase", str(current.phase), run.id, {"iteration": current.index}))
        t0 = time.monotonic()
        try:
            getattr(self, f"phase_{current.phase}")(current.index)
        except Interrupted as e:
            self.event("info", f"iteration {current.index}: {current.phase} interrupted ({e}); it goes on at the next start",
                       iteration=current.index, phase=str(current.phase))
            return False
        except StoreBusy:
            raise  # not the phase's failure, and nothing can be recorded: `tick` waits for the store
        except Exception as e:  # a bug uses up an attempt as an ApplianceError does
            if self.attempts.failed(self.store, run.id, current.index, str(current.phase), e, self.log):
                return False
            raise
        self.attempts.succeeded()
        self.event("info", f"iteration {current.index}: {current.phase} done", time.monotonic() - t0,
                   iteration=current.index, phase=str(current.phase))
        nxt = phases.index(current.phase) + 1
        if nxt < len(phases):
            self.store.set_iteration_phase(run.id, current.index, phases[nxt])
        else:
            self.store.set_iteration_phase(run.id, current.index, Phase.DONE)
            self.store.set_iteration_status(run.id, current.index, IterationStatus.DONE)
        self._step_pending = False
        return True

    def _answer_controls(self) -> None:
        for answered in answer_pending(self.store, self.run.id, step=self._request_step,
                                      stop_after_iteration=self._request_stop):
            self.event("control", f"{answered.command}: {answered.result}")

    def _request_step(self) -> None:
        self._step_pending = True

    def _request_stop(self) -> None:
        self._stop_after = True

    def _stop_requested(self) -> bool:
        """A stop-after-iteration answered since this run last (re)started counts, also across a restart."""
        if getattr(self, "_stop_after", False):
            return True
        since = self.store.get_run(self.run.id).updated_at
        return any(c.command == ControlCommand.STOP_AFTER_ITERATION and c.status == ControlStatus.DONE
                   and (c.acked_at or 0) >= since for c in self.store.controls(self.run.id))

    def _in_window(self) -> bool:
        window = self.settings.loop.training_window
        if not window:
            return True
        start, end = (dt.time.fromisoformat(t.strip()) for t in window.split("-"))
        now = dt.datetime.now().time()
        return start <= now < end if start <= end else now >= start or now < end

    # --- phases -----------------------------------------------------------------------------------
    def _iteration_tasks(self, index: int, status: TaskStatus | None = None) -> list[Task]:
        return self.store.tasks(self.run.id, split=Split.TRAIN, status=status, iteration=index)

    def phase_synthesize(self, index: int) -> None:
        if self.settings.loop.controller == "climb":  # appliance.curriculum: frontier, stretch and replay tasks
            made = synthesize_round(self.store, self.settings, self.run.id, index, self.families,
                                    self.generate_text if self.settings.loop.propose else None)
            self.event("synthesize", f"iteration {index}: " + ", ".join(f"{v} {k}" for k, v in made["made"].items())
                       + " tasks", levels=made["levels"], plan=made["plan"])
            return
        previous = self.store.report(self.run.id, index - 1)
        report = previous[0] if previous else None
        start = self.settings.loop.start_level
        levels = (report or {}).get("levels") or {}
        levels = {f: levels.get(f, start) for f in self.families}
        exclude = {t.spec["id"] for t in self.store.tasks(self.run.id)}  # held-out and earlier tasks
        added = 0
        # `levels` already holds the controller's move (made when the previous report was written);
        # the budget leans toward the families whose pass rate at that level is nearest 50 %.
        budget = split_budget(report, self.settings.loop.tasks_per_iteration, self.families, levels=levels)
        for family in self.families:
            level, count = levels[family], budget.get(family, 0)
            for spec in synthesize(family, level, count, seed=f"{self.run.id}:{index}", exclude=exclude):
                spec.meta["iteration"] = index
                added += self.store.add_task(Task(f"{self.run.id}.{spec.id}", self.run.id, spec.family,
                                                  spec.difficulty, spec.source, Split.TRAIN, TaskStatus.PROPOSED,
                                                  spec.to_spec(), iteration=index))
        self.event("synthesize", f"iteration {index}: {added} new tasks", levels=levels)

    def _validate(self, tasks: list[Task]) -> None:
        """Agent-free validation; an infra failure leaves the task `proposed`, so a later pass retries it."""
        specs = [TaskSpec.from_spec(t.spec) for t in tasks]
        verdicts = validate_many(self.settings, specs, parallel=self.practice.pool.max_concurrent,
                                 start=self.practice.pool.start)
        for task, v in zip(tasks, verdicts):
            for stage in v.stages:
                self.store.add_validation(task.id, stage.name, stage.ok, stage.detail or None)
            if not v.infra:
                self.store.set_task_status(task.id, TaskStatus.VALID if v.ok else TaskStatus.REJECTED, reason=v.reason)
        self._check_stopping("validation")

    def _check_stopping(self, what: str) -> None:
        """Raise Interrupted when a shutdown began while `what` ran: its failures are the shutdown's."""
        if self.practice.stopping.is_set():
            raise Interrupted(f"{what} ran into the shutdown")

    def phase_validate(self, index: int) -> None:
        pending = self._iteration_tasks(index, TaskStatus.PROPOSED)
        self._validate(pending)
        checked = {t.id for t in pending}
        valid = self._iteration_tasks(index, TaskStatus.VALID)
        new_valid = sum(t.id in checked for t in valid)
        # replays (and tasks a crash left validated) were valid before this pass: counted apart
        self.event("validate", f"iteration {index}: {new_valid} of {len(pending)} new tasks valid, "
                               f"{len(valid) - new_valid} valid before")
        if self.settings.training.demonstrations:
            made = prepare_demonstrations(self.settings, self.store, self.run.id, index, self._chat_tokenizer(),
                                          self.families, start=self.practice.pool.start,
                                          stopping=self.practice.stopping)
            self._check_stopping("demonstrations")
            self.event("demonstrations", f"iteration {index}: {made.added} new demonstrations", **made.as_dict())

    def _run_pending(self, work: list[tuple[TaskSpec, str]]) -> None:
        """Run the rollouts named in `work` that are not finished; requeue those a crash interrupted."""
        todo = []
        for spec, rollout_id in work:
            r = self.store.get_rollout(rollout_id)
            if r.status == RolloutStatus.RUNNING:
                self.store.requeue_rollout(rollout_id)
                r = self.store.get_rollout(rollout_id)
            if r.status == RolloutStatus.PENDING:
                todo.append((spec, r))
        run_rollouts(self.practice, todo)

    def phase_practise(self, index: int) -> None:
        lp = self.settings.loop
        if self._warmstart_first(index):
            self.event("practise", f"iteration {index}: no practice: the warm-start SFT comes first "
                                   "(loop.warmstart_first)")
            return
        tasks = self._iteration_tasks(index, TaskStatus.VALID) + [
            t for t in self._iteration_tasks(index)
            if t.status in (TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD)]
        work = []
        for task in tasks:
            group = f"{task.id}.g{index}"
            for k in range(lp.group_size):
                r = new_rollout(self.store, harness=lp.harness, policy_version=self.engine.policy_version,
                                run_id=self.run.id, task_id=task.id, group_id=group, iteration=index,
                                purpose="train", rollout_id=f"{group}.{k}")
                work.append((TaskSpec.from_spec(task.spec), r.id))
        self._run_pending(work)
        self._draw_more(index, tasks)
        for task in self._iteration_tasks(index, TaskStatus.VALID):
            rs = [r for r in self.store.rollouts(self.run.id, group_id=f"{task.id}.g{index}")
                  if r.outcome != Outcome.INFRA_ERROR]
            if rs:  # every rollout an infra error: no verdict; the task stays valid for a later round
                record_band(self.store, task.id, sum(r.outcome == Outcome.SUCCESS for r in rs), len(rs), lp.band)
        rollouts = self.store.rollouts(self.run.id, iteration=index, purpose="train")
        wins = sum(r.outcome == Outcome.SUCCESS for r in rollouts)
        infra = sum(r.outcome == Outcome.INFRA_ERROR for r in rollouts)
        self.event("practise", f"iteration {index}: {len(rollouts)} rollouts, {wins} successes, {infra} infra errors")

    def _warmstart_first(self, index: int) -> bool:
        cfg = self.settings.training
        if not (self.settings.loop.warmstart_first and cfg.demonstrations and index == 1):
            return False
        if self.store.rollouts(self.run.id, iteration=index, purpose="train"):
            return False  # practised before (a run that started with the setting off): finish that
        return not self.store.checkpoints(self.run.id) and bool(
            self.store.demonstrations(self.run.id, levels=cfg.demo_warmstart_levels))

    def _draw_more(self, index: int, tasks: list[Task]) -> None:
        """Dynamic sampling (DAPO), bounded: a group whose valid rollouts all scored the same has advantage 0
        and teaches nothing, so it gets more rollouts, group_size at a time, up to `loop.extra_draws` extra,
        until its rewards differ. Ids continue the group's numbering, so a restart resumes the same draws."""
        lp, drawn = self.settings.loop, 0
        for _ in range(-(-lp.extra_draws // lp.group_size) + 1):  # the bound's rounds, plus one to finish a crash's
            work = []
            for task in tasks:
                group = f"{task.id}.g{index}"
                rs = self.store.rollouts(self.run.id, group_id=group)
                unfinished = [r for r in rs if r.status != RolloutStatus.FINISHED]
                if unfinished:  # drawn before a crash: run those first
                    work += [(TaskSpec.from_spec(task.spec), r.id) for r in unfinished]
                    continue
                rewards = [float(r.reward or 0.0) for r in rs if r.outcome != Outcome.INFRA_ERROR]
                for k in range(len(rs), len(rs) + extra_draws_for(rewards, lp.group_size, lp.extra_draws, len(rs))):
                    r = new_rollout(self.store, harness=lp.harness, policy_version=self.engine.policy_version,
                                    run_id=self.run.id, task_id=task.id, group_id=group, iteration=index,
                                    purpose="train", rollout_id=f"{group}.{k}")
                    work.append((TaskSpec.from_spec(task.spec), r.id))
            if not work:
                break
            drawn += len(work)
            self._run_pending(work)
        if drawn:
            self.event("practise", f"iteration {index}: {drawn} extra rollouts for groups without signal", extra=drawn)

    def phase_train(self, index: int) -> None:
        if any(c.iteration == index for c in self.store.checkpoints(self.run.id)):
            return  # trained before a crash; the engine restored these weights at start
        rollouts = [r for r in self.store.rollouts(self.run.id, iteration=index, purpose="train")
                    if r.status == RolloutStatus.FINISHED]
        self.store.check_trainable({r.task_id for r in rollouts if r.task_id})
        from appliance.training.data import samples_of

        samples = samples_of(self.store, rollouts)  # a rollout whose samples are missing is rebuilt
        mix = self._demonstration_mix(index, len(samples))
        try:
            result = learn(self.store, mix.settings, self.engine, rollouts, samples, run_id=self.run.id,
                           iteration=index, steps=self.settings.loop.train_steps, demonstrations=mix.samples,
                           should_stop=self.practice.stopping.is_set)
        except ApplianceError as e:  # a failed sync keeps the old weights serving; the run goes on
            self._check_stopping("training")
            self.event("error", f"iteration {index}: training did not produce new weights: {e.message}")
            return
        self.event("train", f"iteration {index}: policy version {result.policy_version}",
                   sum(result.timings.values()), steps=len(result.steps))

    def phase_evaluate(self, index: int) -> None:
        heldout = self.store.tasks(self.run.id, split=Split.HELDOUT)
        proposed = [t for t in heldout if t.status == TaskStatus.PROPOSED]
        if proposed:
            self._validate(proposed)
        # One rule for held-out pass@1, whatever the controller: `evaluate` samples, budgets and counts it.
        result = evaluate_heldout(self.store, self.settings, self.run.id, index, self.engine.policy_version,
                                  harness=self.settings.loop.harness, run_pending=self._run_pending,
                                  new_rollout=new_rollout)
        self.event("evaluate", f"iteration {index}: held-out pass@1 {result.describe()} over {result.tasks} "
                   f"tasks x {result.k} at policy version {self.engine.policy_version}")
        dev = evaluate_devset(self.store, self.settings, self.run.id, index, self.engine.policy_version,
                              harness=self.settings.loop.harness, run_pending=self._run_pending,
                              new_rollout=new_rollout, validate=self._validate)
        if dev is not None:
            self.event("evaluate", f"iteration {index}: dev-set pass@1 {dev.describe()} over {dev.tasks} tasks x {dev.k}")

    def phase_diagnose(self, index: int) -> None:
        previous = self.store.report(self.run.id, index - 1) if index > 0 else None
        start = self.settings.loop.start_level
        levels = (previous[0] if previous else {}).get("levels") or {}
        levels = {f: levels.get(f, start) for f in self.families}
        report, _ = build_report(self.store, self.run.id, index,
                                 self.generate_text if self.settings.loop.analysis else None)
        if index > 0:
            levels = next_levels(report, levels)
        report["levels"] = levels  # what the next synthesis uses
        if self.settings.loop.controller == "climb":  # iteration 0 plans too
            report.update(control(self.store, self.run.id, index, self.families, report, self.settings))
            curve = learning_curve_with_intervals(self.store, self.run.id)
            report["evaluation"] = curve[-1][1].as_dict() if curve and curve[-1][0] == index else None
            report["curve"] = [{"iteration": it, **p.as_dict()} for it, p in curve]
            report_md = render_markdown(report)
            self.store.save_report(self.run.id, index, report, report_md)
            ev = report["evaluation"]
            said = f"{ev['pass_at_1']:.1%} [{ev['low']:.1%}, {ev['high']:.1%}]" if ev else "n/a"
            self.event("diagnose", f"iteration {index}: report saved (held-out pass@1 {said})")
            return
        self.store.save_report(self.run.id, index, report, render_markdown(report))
        p = report["heldout_pass_at_1"]
        self.event("diagnose", f"iteration {index}: report saved (held-out pass@1 {'n/a' if p is None else f'{p:.1%}'})")

    # --- the policy writing text (report analysis) -----------------------------------------------
    def generate_text(self, prompt: str) -> str:
        body = {"model": self.engine.model_name(), "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 96, "temperature": 0.0}
        r = httpx.post(f"{self.engine.base_url}/v1/chat/completions", json=body, timeout=300)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"] or ""

    # --- demonstrations (appliance.demonstrations) -----------------------------------------------
    def _chat_tokenizer(self) -> ChatTokenizer:
        if getattr(self, "_tokenize", None) is None:
            self._tokenize = self.chat_tokenizer or chat_tokenizer(self.settings.model_path)
        return self._tokenize

    def _demonstration_mix(self, index: int, rl_samples: int) -> DemoMix:
        """Hindsight relabels of this iteration's hinted successes, then what LEARN trains on besides RL."""
        if not self.settings.training.demonstrations:
            return DemoMix([], False, self.settings)
        relabelled = relabel_hindsight(self.store, self.run.id, index, self._chat_tokenizer(), keep_successes=True)
        previous = self.store.report(self.run.id, index - 1)
        frontier = {f: int(v) for f, v in ((previous[0] if previous else {}).get("levels") or {}).items()}
        mix = training_mix(self.settings, self.store, self.run.id, index, frontier, rl_samples)
        self.event("demonstrations", f"iteration {index}: {mix.describe()} ({relabelled} new from successes)",
                   warmstart=mix.warmstart, samples=len(mix.samples), hindsight=relabelled)
        return mix


def extra_draws_for(rewards: list[float], group_size: int, max_extra: int, drawn: int | None = None) -> int:
    """How many more rollouts a group gets now: none once its (valid) rewards differ, none without any valid
    reward (the machine failed; more draws would fail too), otherwise up to group_size more while fewer than
    `max_extra` extra have been drawn (`drawn`: rollouts so far, infra errors included)."""
    drawn = len(rewards) if drawn is None else drawn
    if not rewards or len(set(rewards)) > 1:
        return 0
    return max(0, min(group_size, group_size + max_extra - drawn))
