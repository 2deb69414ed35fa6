"""TRAIN: one learning step on the iteration's finished rollouts and the demonstrations mixed in (LEARN).

Skipped when the iteration's checkpoint exists: the engine restored those weights at start. DESIGN.md's
walk-through follows a rollout's reward from the verifier's verdict through its samples' advantages to
the loss.

Weights the engine refuses at their sync (a failed reload or canary: it serves the previous policy on)
are not thrown away: they are kept beside the published versions, a `rollback` event says so (the TUI's
overview and the iteration's report show it), and the next TRAIN goes on from them.

The loop steers the training at its safe point before each optimizer step (`steer`): a pause holds the next
step (the trainer keeps its memory meanwhile), `appliance stop --now` or SIGTERM saves what was trained so
far, and the next start finishes the phase from there (`training.midway`). The phase's progress counts
the training steps done of its total.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from appliance.demonstrations import DemoMix, training_mix
from appliance.errors import ApplianceError, DiskFull
from appliance.hindsight import Relabelled, relabel_hindsight
from appliance.phases.context import PhaseContext
from appliance.schemas import CapabilityReport, Checkpoint, RolloutStatus
from appliance.store import Store
from appliance.training.learn import Steer, StepWord, SyncRolledBack, learn

ROLLED_BACK = "rollback"  # the event kind of trained weights the engine refused


def train(ctx: PhaseContext, index: int) -> None:
    if any(c.iteration == index for c in ctx.store.checkpoints(ctx.run_id)):
        return  # trained before a crash; the engine restored these weights at start
    rollouts = [r for r in ctx.store.rollouts(ctx.run_id, iteration=index, purpose="train")
                if r.status == RolloutStatus.FINISHED]
    ctx.store.check_trainable({r.task_id for r in rollouts if r.task_id})
    from appliance.training.data import samples_of

    samples = samples_of(ctx.store, rollouts)  # a rollout whose samples are missing is rebuilt
    mix = demonstration_mix(ctx, index, len(samples))
    resume = refused_checkpoint(ctx.store, ctx.run_id)
    try:
        result = learn(ctx.store, mix.settings, ctx.engine, rollouts, samples, run_id=ctx.run_id, iteration=index,
                       steps=ctx.settings.loop.train_steps, demonstrations=mix.samples,
                       steer=steer(ctx), resume=resume)
    except DiskFull:
        raise  # not a failed sync: a run that goes on without ever saving would learn nothing for days
    except SyncRolledBack as e:
        keep_refused(ctx, index, e)
        drop_refused(ctx, resume)  # trained on: the newer refused weights hold what it taught
        ctx.check_stopping("training")
        return
    except ApplianceError as e:  # a failed sync keeps the old weights serving; the run goes on
        ctx.check_stopping("training")
        ctx.event("error", f"iteration {index}: training did not produce new weights: {e.message}")
        return
    if result.checkpoint is not None:
        drop_refused(ctx, resume)  # a published version trained on from them serves now
    ctx.event("train", f"iteration {index}: policy version {result.policy_version}", sum(result.timings.values()),
              steps=len(result.steps))


def steer(ctx: PhaseContext) -> Steer:
    """The loop's controls at the training's safe points, and its progress for `appliance status`."""

    def word() -> StepWord:
        said: StepWord = "stop" if ctx.stop_now.is_set() or ctx.practice.stopping.is_set() else (
            "hold" if ctx.held() else "go")
        ctx.progress.holding = said == "hold"
        return said

    return Steer(word, ctx.progress.steps, ctx.progress.checking)


def demonstration_mix(ctx: PhaseContext, index: int, rl_samples: int) -> DemoMix:
    """Hindsight relabels of this iteration's hinted successes, then what LEARN trains on besides RL."""
    if not ctx.settings.training.demonstrations:
        return DemoMix([], False, ctx.settings)
    relabelled = relabel_hindsight(ctx.store, ctx.run_id, index, ctx.tokenizer(), keep_successes=True) \
        if ctx.settings.training.sft_on_successes else Relabelled()  # off: no success enters the pool
    if relabelled.unrendered:
        rollout_id, why = next(iter(relabelled.unrendered.items()))
        ctx.event("error", f"iteration {index}: the chat template could not render {len(relabelled.unrendered)} "
                           f"successes as demonstrations (first, rollout {rollout_id}: {why})",
                  unrendered=len(relabelled.unrendered))
    frontier = {f: int(v) for f, v in (ctx.previous_report(index) or CapabilityReport()).levels.items()}
    mix = training_mix(ctx.settings, ctx.store, ctx.run_id, index, frontier, rl_samples)
    ctx.event("demonstrations", f"iteration {index}: {mix.describe()} ({relabelled.added} new from successes)",
              iteration=index, warmstart=mix.warmstart, samples=len(mix.samples), hindsight=relabelled.added)
    return mix


def keep_refused(ctx: PhaseContext, index: int, e: SyncRolledBack) -> None:
    """Keep the weights the engine refused under their own name (the next LEARN saves the same version's folder
    again) and say loudly that this iteration's training is not what serves."""
    trained = Path(e.checkpoint.path)
    kept = trained.with_name(f"{trained.name}-refused-it{index}")
    shutil.rmtree(kept, ignore_errors=True)
    trained.rename(kept)
    ctx.event(ROLLED_BACK, f"iteration {index}: the engine refused the trained weights and serves policy "
              f"v{ctx.engine.policy_version} on: {e.message}. The next training goes on from the refused weights "
              f"({kept})", iteration=index, checkpoint=str(kept), weights_kind=e.checkpoint.kind,
              policy_version=e.checkpoint.policy_version, metrics=e.checkpoint.metrics, reason=e.message)


def drop_refused(ctx: PhaseContext, refused: Checkpoint | None) -> None:
    """Delete refused weights a newer checkpoint supersedes: each is a model's worth of disk (and its optimizer
    state twice that), and nothing resumes from it any more."""
    if refused is not None and "-refused-it" in Path(refused.path).name \
            and Path(refused.path).resolve().is_relative_to(ctx.settings.checkpoints_dir.resolve()):
        shutil.rmtree(refused.path, ignore_errors=True)


def refused_checkpoint(store: Store, run_id: str) -> Checkpoint | None:
    """The run's newest refused weights, while no version was published after them and they are on disk."""
    found = store.latest_events(run_id, limit=1, kinds=(ROLLED_BACK,))
    if not found or not Path(found[0].data.get("checkpoint", "")).is_dir():
        return None
    published = store.latest_checkpoint(run_id)
    if published is not None and published.created_at >= found[0].created_at:
        return None
    d = found[0].data
    return Checkpoint(run_id, int(d["policy_version"]), d.get("iteration"), str(d["weights_kind"]),
                      str(d["checkpoint"]), dict(d.get("metrics") or {}))
