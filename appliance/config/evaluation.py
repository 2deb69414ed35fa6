"""The evaluation section of the settings tree: how EVALUATE measures held-out pass@1, the transfer dev set and
the task sets the user brings (k, sampling, the budget, the baseline's balanced prefixes; `appliance.evaluate`
reads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from appliance.config.section import Section


class EvaluationSettings(Section):
    samples_per_task: int = Field(
        2, ge=1, description="Rollouts per held-out task (k); pass@1 is the mean over all of them, with a 95 % Wilson "
                             "interval.")
    temperature: float | None = Field(
        None, ge=0, description="Sampling temperature of the built-in agent's evaluation rollouts (held-out and dev "
        "set), the one a deployed agent would run at; practice keeps harness.temperature for exploration. None: "
        "harness.temperature. Compare runs only at the same value.")
    budget_share: float = Field(
        0.33, gt=0, le=1, description="Evaluation's share of an iteration's wall time: held-out tasks are cut (evenly "
        "over families and levels) so the measured rollout time stays under this share of the last iteration.")
    min_tasks: int = Field(8, ge=1, description="Held-out tasks evaluated at least, whatever the budget says.")
    baseline_tasks: int = Field(
        45, ge=0, description="Held-out tasks the baseline (iteration 0) evaluates: the balanced prefix every later "
        "point's budget also cuts from (45 = one per family and level of the default set), so the first trained "
        "point comes that much sooner; 0 = every held-out task (issue 49: the base model's whole held-out and dev "
        "sets, 312 rollouts nearly all cut at the turn limit, took 58 minutes on 2 cores before the first training "
        "step).")
    devset: bool = Field(
        True, description="Also evaluate the transfer dev set (appliance/tasks/devset: everyday tasks written "
        "independently of the families, never trained on) with the same k and interval, for choosing recipes.")
    devset_batch: Literal["first", "second"] = Field(
        "first", description="Which batch of the dev set a run measures: first (66 tasks; the convert family's "
        "chapters were chosen by reading its reference commands) or second (written later from other man pages, "
        "never read for the families). A run keeps the batch it started with.")
    devset_min_tasks: int = Field(
        10, ge=0, description="Dev tasks evaluated at least (round-robin over its categories) when the budget left "
        "after the held-out set does not fit the whole dev set.")
    baseline_devset_tasks: int = Field(
        10, ge=0, description="Dev tasks the baseline (iteration 0) evaluates, at least devset_min_tasks, a prefix of "
        "the same balanced order as every later point's: the whole dev set there (132 rollouts) held back the first "
        "training step; 0 = all of it.")
    after_warmstart: bool = Field(
        True, description="Evaluate the policy the warm-start SFT alone trained (iteration 1 under "
        "loop.warmstart_first). Off: that EVALUATE is skipped and its minutes go to practice and training; the next "
        "evaluation measures warm-start and practice together (what a time-boxed run wants).")
    extra_sets: list[Path] = Field(
        default_factory=list, description="Task sets you bring, measured at the baseline and after every iteration "
        "beside the held-out set and the dev set, each with its own curve and 95 % interval (report, TUI, HTML "
        "report): task directories or folders of them in any format `appliance eval` reads (the appliance's own, "
        "Harbor, Terminal-Bench 1). Validated by oracle once, at a run's first evaluation of the set (each exclusion "
        "named with its reason); then every valid task is evaluated each time, outside evaluation.budget_share. "
        "Never practised or trained on: their rollouts belong to no run. A relative path is read from the "
        "directory the appliance runs in.")
    extra_samples_per_task: int | None = Field(
        None, ge=1, description="Rollouts per task of each extra set (k) at every evaluation; None: "
        "samples_per_task.")
