"""The LEARN phase, time-sliced with serving: pause the engine, train, save, sync the weights, resume.

    engine.pause_for_training()      drain, then sleep (GPU: vLLM sleep mode) or just stop serving (CPU)
    train                            resume the trainer from the latest checkpoint; SFT and/or GRPO steps
    save                             checkpoints_dir/v{N}: adapter or full weights + optimizer state (kept
                                     for each run's newest checkpoint only: `drop_stale_optimizer_states`)
    engine.load_weights(path, kind)  LoRA adapter load or full reload, wake, canary, serve: version N

A phase with nothing to learn (every group's rollouts scored the same, beta 0) does not pause serving and
publishes no version; one whose steps changed no weight resumes serving on the old ones.

`load_weights` ends serving by itself (on the new weights, or, when the sync or its canary fails, on the
previous ones, raising `EngineError`); `engine.resume()` is only for a phase that ends without new weights
(training failed, or nothing to save). So a crashed trainer never leaves serving asleep.

Each transition is an event row with its duration, and each step's metrics a row set in `metrics`, so the
TUI draws the timeline and the learning curve. The trainer is built per phase and freed
afterwards, so its memory is back for serving; resume-from-checkpoint is therefore the normal path, tested
on every phase, not a recovery path that rots.

Between two optimizer steps (SFT's or GRPO's, here or in the workers) the phase passes a safe point
(`Steer`): a pause holds the next step back while the trainer keeps its memory (the GPU stays the trainer's;
serving sleeps), and a stop (`appliance stop --now`, SIGTERM) saves what was trained so far as the phase's
midway state (`midway.py`), from which the next start finishes the phase, repeating no step.

`training.processes` = 1 trains in this process. More (0 = one per visible GPU) runs the same steps in
that many data-parallel workers launched through accelerate while serving sleeps (`multiprocess.py`); the
workers' rank 0 saves the checkpoint and reports the steps' metrics, which this process records.
"""

from __future__ import annotations

import gc
import math
import time
import traceback
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Literal

from appliance.config import Settings
from appliance.errors import EngineError, Interrupted
from appliance.schemas import Checkpoint, Event, Rollout, Sample
from appliance.seams import EngineControl
from appliance.store import Store
from appliance.training.advantages import GroupedBatch, build_groups
from appliance.training.midway import Midway, drop_midway, frozen_file, load_midway, midway_dir, save_midway

if TYPE_CHECKING:
    from appliance.training.trainer import PolicyTrainer


StepWord = Literal["go", "hold", "stop"]
HOLD_POLL_S = 0.2  # how often a held training step looks again


@dataclass
class Steer:
    """How the loop steers a training phase at its safe points, before each optimizer step: `word()` says go,
    hold (a pause: the step waits) or stop (the phase saves its midway state and raises Interrupted);
    `progress(done, total)` hears the steps done of the phase's total at each safe point."""

    word: Callable[[], StepWord]
    progress: Callable[[int, int], None] = lambda done, total: None
    checking: Callable[[], AbstractContextManager[None]] = nullcontext  # around a count and its word, as one

    def at(self, done: int, total: int) -> StepWord:
        with self.checking():
            self.progress(done, total)
            return self.word()

    def safe_point(self, done: int, total: int) -> None:
        while (word := self.at(done, total)) == "hold":
            time.sleep(HOLD_POLL_S)
        if word == "stop":
            raise Interrupted(f"training step {done + 1} of {total} not started: the run is stopping")


@dataclass
class LearnResult:
    policy_version: int
    checkpoint: Checkpoint | None
    steps: list[dict[str, float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # pause_s, load_s, train_s, save_s, sync_s | resume_s

    @property
    def compute_share(self) -> float:
        total = sum(self.timings.values())
        return self.timings.get("train_s", 0.0) / total if total else 0.0


def split_groups(batch: GroupedBatch, steps: int) -> list[GroupedBatch]:
    """Deal the kept groups over `steps` optimizer steps (whole groups: a baseline never spans two steps)."""
    by_group: dict[str, list[Sample]] = {}
    for s in batch.samples:
        by_group.setdefault(s.group_id or f"rollout:{s.rollout_id}", []).append(s)
    groups = list(by_group.values())
    steps = max(1, min(steps, len(groups)))
    per = math.ceil(len(groups) / steps) if groups else 0
    out = []
    for i in range(steps):
        chunk = groups[i * per: (i + 1) * per]
        part_samples = [s for g in chunk for s in g]
        rewards = {rid: batch.rewards[rid] for rid in dict.fromkeys(s.rollout_id for s in part_samples)}
        signal = sum(any(s.advantage for s in g) for g in chunk)
        turns = {s.rollout_id: batch.turns[s.rollout_id] for s in part_samples if s.rollout_id in batch.turns}
        part = GroupedBatch(part_samples, len(chunk), 0, 0, batch.rollouts, len(rewards), batch.infra_errors, rewards,
                            signal, turns)
        if i == 0:  # the phase's dropped/zero-std counts are reported once, with the first step
            part.dropped_groups, part.zero_std_groups = batch.dropped_groups, batch.zero_std_groups
        out.append(part)
    return out


def learn(store: Store, settings: Settings, engine: EngineControl, rollouts: list[Rollout], samples: list[Sample],
          *, run_id: str | None, iteration: int | None, steps: int = 1,
          demonstrations: list[Sample] | None = None, steer: Steer | None = None,
          resume: Checkpoint | None = None) -> LearnResult:
    """Train on the rollouts' samples while the engine is paused; returns the new policy version and metrics.

    `resume`: trained weights the engine refused at their sync (`SyncRolledBack.checkpoint`): training goes
    on from them rather than from the version served, so a refused sync does not throw the training away.

    `demonstrations` (appliance.demonstrations) are SFT-only samples, trained with the successes whatever
    training.method says; they never enter the GRPO groups. `steer` is asked before each optimizer step
    (in this process, or through the workers' job folder): a hold waits there, a stop saves the phase's
    midway state, raises Interrupted, publishes nothing and leaves the engine paused for the shutdown to
    stop (waking it would only delay the exit). A midway state of this iteration's phase is finished first,
    on the inputs it started with."""
    from appliance.training.multiprocess import resolve_processes
    from appliance.training.sft import own_successes, sft_plan

    cfg = settings.training
    result = LearnResult(engine.policy_version, None)
    timings = result.timings
    processes = resolve_processes(cfg)  # a bad training.processes fails here, before serving pauses
    folder = midway_dir(settings.checkpoints_dir, run_id, iteration)
    midway = load_midway(folder, run_id, iteration)
    if midway is not None and not frozen_file(folder, 0, processes).exists():
        store.add_event(Event("train", "the training stopped midway was saved by another number of trainer "
                              "processes: the phase starts over", run_id, {"iteration": iteration}))
        midway = None
    # a run that continues from a trained policy (its first LEARN phase) trains on from the version served
    latest = resume or store.latest_checkpoint(run_id) or store.checkpoint_of_version(engine.policy_version)

    def note(what: str, seconds: float, **data: object) -> None:
        store.add_event(Event("train", what, run_id, {"iteration": iteration, **data}, seconds))

    if midway is None:
        drop_midway(folder)  # another run's or a half-written one
        # Groups whose rollouts all scored the same teach nothing; without a KL term they are left out before
        # the steps are dealt, so no step is taken (and no version published) on momentum alone.
        # ppo keeps them: its critic's baseline gives their turns an advantage (and they are the critic's data).
        batch = build_groups(rollouts, samples, min_valid_rollouts=cfg.min_valid_rollouts,
                             scale_rewards=cfg.scale_rewards and cfg.loss_type != "dr_grpo",
                             keep_zero_std=cfg.beta != 0.0 or cfg.method == "ppo")
        sft_samples = own_successes(cfg, rollouts, samples)
        sft_samples += list(demonstrations or [])
        global_step = int(latest.metrics.get("global_step", 0)) if latest else 0
        if not batch.samples and not sft_samples:
            what = ("no signal: every group's rollouts scored the same" if batch.zero_std_groups
                    else "nothing to train on")
            note(what, 0.0, dropped_groups=batch.dropped_groups, zero_std_groups=batch.zero_std_groups,
                 infra_errors=batch.infra_errors)
            store.add_metrics(run_id, global_step, _batch_metrics(batch))
            result.steps.append(_batch_metrics(batch))
            return result
        parts = split_groups(batch, steps) if cfg.method in ("grpo", "both", "ppo") and batch.samples else []
        work = Midway(run_id, iteration, sft_samples, parts, len(sft_plan(cfg, sft_samples)) if sft_samples else 0,
                      global_step=global_step)
        resume_from, resume_kind = (Path(latest.path), latest.kind) if latest else (None, None)
    else:
        work, resume_from, resume_kind = midway, folder, midway.kind
        note("training goes on from where it stopped", 0.0, steps_done=work.done, steps_total=work.total,
             global_step=work.global_step)
    settings.check_lora_rank()  # as does a LoRA rank the engine would refuse (set after the settings loaded)
    result.steps = list(work.steps)

    def record(step: dict[str, float]) -> None:
        result.steps.append(step)
        store.add_metrics(run_id, work.global_step, step)

    with _timed(timings, "pause_s"):
        engine.pause_for_training()
    note("engine paused for training", timings["pause_s"])
    trainer, synced, interrupted = None, False, False
    try:
        version = engine.policy_version + 1
        path = settings.checkpoints_dir / f"v{version}"
        if processes == 1:
            from appliance.training.trainer import PolicyTrainer

            with _timed(timings, "load_s"):
                trainer = PolicyTrainer(cfg, settings.model_path, resume_from=resume_from, resume_kind=resume_kind)

            def keep(w: Midway) -> None:
                assert trainer is not None
                save_midway(trainer, w, folder)

            with _timed(timings, "train_s"):
                run_steps(trainer, work.sft_samples, work.parts, record, steer.safe_point if steer else None,
                          work=work, resumed_from=folder if midway is not None else None, keep=keep)
            note("trained", timings["train_s"], steps=len(result.steps), global_step=work.global_step)
            with _timed(timings, "save_s"):
                kind = trainer.save(path)
            del trainer, keep  # free the trainer's memory before the engine wakes into it
            trainer = None
            _free_memory()
        else:
            from appliance.training.multiprocess import train_in_workers

            out = train_in_workers(settings, processes, resume_from=resume_from, resume_kind=resume_kind,
                                   work=work, midway=folder, resumed=midway is not None, save_to=path, steer=steer)
            for step in out.steps:
                work.global_step += 1
                record(step)
            if out.interrupted:
                raise Interrupted("training stopped between two steps; what it trained is saved to go on from")
            kind = out.kind
            timings["train_s"], timings["save_s"] = out.timings["train_s"], out.timings["save_s"]
            # launching the workers, their imports and model load, and their exit count as loading
            timings["load_s"] = max(0.0, out.wall_s - timings["train_s"] - timings["save_s"])
            note("trained", timings["train_s"], steps=len(result.steps), global_step=work.global_step,
                 processes=processes)
        drop_midway(folder)  # what it held is in `path` now
        if any(step.get("trained_tokens") or step.get("sft_steps") for step in result.steps):
            synced = True  # from here on the engine, not this phase, brings serving back
            summary = {**_last(result.steps), "global_step": float(work.global_step)}
            try:
                with _timed(timings, "sync_s"):
                    result.policy_version = engine.load_weights(path, kind)
            except EngineError as e:  # the previous weights serve on; the trained ones are saved all the same
                raise SyncRolledBack(e.message, e.hint, Checkpoint(run_id, version, iteration, kind, str(path),
                                                                   summary)) from e
            note("weights synced", timings["sync_s"], policy_version=result.policy_version, kind=kind)
            result.checkpoint = Checkpoint(run_id, result.policy_version, iteration, kind, str(path), summary)
            store.add_checkpoint(result.checkpoint)
            drop_stale_optimizer_states(store)
        else:  # no step changed the weights: the policy is the one serving, no new version
            note("no update: no step had a token to learn from", 0.0, steps=len(result.steps))
    except BaseException as e:
        interrupted = isinstance(e, Interrupted)
        # The traceback holds every frame the exception left, with their locals: a failed step's tensors (an
        # OOM's logits and activations) and the trainer itself (`self` of its methods). Without this the
        # `del trainer` below frees nothing and the engine wakes into the memory they pin.
        _clear_frames(e)
        raise
    finally:
        if not synced:
            del trainer
            _free_memory()
        if not synced and not interrupted:
            with _timed(timings, "resume_s"):
                engine.resume()
            note("serving resumed without new weights", timings["resume_s"], policy_version=engine.policy_version)
    store.add_metrics(run_id, work.global_step, {k: v for k, v in timings.items()})
    return result


class SyncRolledBack(EngineError):
    """The engine refused the trained weights at their sync (a failed reload or canary) and serves the previous
    ones; `checkpoint` is what was trained and saved, never published: the next LEARN resumes from it."""

    def __init__(self, message: str, hint: str, checkpoint: Checkpoint) -> None:
        super().__init__(message, hint)
        self.checkpoint = checkpoint


def drop_stale_optimizer_states(store: Store) -> list[Path]:
    """Delete `trainer/optimizer.pt` from every checkpoint but each run's newest; returns what was deleted.

    The optimizer state is read only to resume a run from its newest checkpoint (a run that continues from
    another's policy resumes from the newest one too). Older versions keep their weights, so they stay
    servable and exportable; their AdamW moments (twice the trained weights: 1 GB a version for the bundled
    model trained in full) would otherwise grow the data directory by that much every iteration. Called
    after the new checkpoint's row is stored, so a crash at any point leaves a resumable run."""
    from appliance.training.trainer import OPTIMIZER_FILE

    checkpoints = store.checkpoints()  # oldest first
    newest = {c.run_id: c.path for c in checkpoints}
    removed = []
    for c in checkpoints:
        state = Path(c.path) / OPTIMIZER_FILE
        if c.path != newest[c.run_id] and state.exists():
            state.unlink()
            removed.append(state)
    return removed


def run_steps(trainer: PolicyTrainer, sft_samples: list[Sample], parts: list[GroupedBatch],
              record: Callable[[dict[str, float]], None], safe_point: Callable[[int, int], None] | None = None, *,
              work: Midway | None = None, resumed_from: Path | None = None,
              keep: Callable[[Midway], None] | None = None) -> Midway:
    """The phase's optimizer work on one trainer: SFT first (it moves the policy toward its own successes,
    GRPO then sharpens), then one GRPO step per part; `record` gets each step's metrics as it ends.

    pi_old (the policy that sampled the rollouts) is recorded before any update, SFT's included, so every
    GRPO step's ratio and clip measure the distance from it. A phase of one GRPO step with no SFT before
    it skips that pass: nothing updates the policy before the step's own forward passes (its micro-batches
    accumulate gradients for one optimizer step), so their detached logprobs are pi_old itself, and the
    extra no-grad forward over every sample (a quarter of the phase on the CPU bench) would recompute them.
    The critic's values are frozen by the same pass, and the turn-level credit of ppo (or GRPO's
    turn_credit) is computed from them once for the phase, so with a value head the pass always runs.

    `safe_point(done, total)` is called before each optimizer step (SFT's and GRPO's); when it raises
    Interrupted, `keep` saves `work` (the phase's midway state, which this advances step by step) if a
    step was taken since it started. `work` with `resumed_from` (the folder it was loaded from) goes on
    where it stopped: its frozen pi_old is put back, and no finished step runs again."""
    from appliance.training.midway import restore_frozen
    from appliance.training.sft import sft, sft_plan

    if work is None:
        work = Midway(None, None, sft_samples, parts,
                      len(sft_plan(trainer.cfg, sft_samples)) if sft_samples else 0)
    if resumed_from is not None:
        restore_frozen(trainer, resumed_from)
    elif work.parts and (work.sft_samples or len(work.parts) > 1 or trainer.value_head is not None):
        trainer.freeze_old_logps(work.parts)
        work.parts = trainer.assign_credit(work.parts)
        work.frozen = True
    started = work.done

    def point() -> None:
        if safe_point is not None:
            safe_point(work.done, work.total)

    def ended(step: dict[str, float]) -> None:
        work.steps.append(step)
        work.global_step += 1
        record(step)

    try:
        if work.sft_samples and not work.sft_finished:
            step = sft(trainer, work.sft_samples, point, work.sft)
            work.sft_finished = True
            ended(step)
        while work.parts_done < len(work.parts):
            point()
            step = trainer.grpo_step(work.parts[work.parts_done])
            work.parts_done += 1
            ended(step)
    except Interrupted as stop:
        if keep is not None and work.done > started:
            try:
                keep(work)
            except Exception as e:  # noqa: BLE001  a stop stays a stop (not the phase's failure); say what is lost
                raise Interrupted(f"{stop}; saving the {work.done} steps done failed ({e}): the next start goes "
                                  "on from the last state saved, or starts the phase over") from e
        raise
    return work


def _batch_metrics(batch: GroupedBatch) -> dict[str, float]:
    return {"valid_groups": batch.valid_groups, "dropped_groups": batch.dropped_groups,
            "zero_std_groups": batch.zero_std_groups, "groups_with_signal": batch.signal_groups,
            "infra_error_rate": batch.infra_error_rate, "reward_mean": batch.reward_mean,
            "reward_std": batch.reward_std, "rollouts": batch.rollouts, "skipped_steps": 1.0}


def _last(steps: list[dict[str, float]]) -> dict[str, float]:
    return dict(steps[-1]) if steps else {}


@contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[key] = time.perf_counter() - t0


def _clear_frames(error: BaseException) -> None:
    """Drop the locals of the frames `error` (and the errors it chains) left; the traceback keeps its lines."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)  # skips the frames still running (this phase's own)
        todo += [e.__cause__, e.__context__]


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a dependency; keep freeing best-effort
        pass
