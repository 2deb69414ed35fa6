"""The capability report as one typed record: what `diagnosis.build_report` computes after an iteration,
what the diagnose phase adds (the controller's levels and decisions, the held-out interval and curve), and
what the store keeps as the report's JSON.

The tables inside stay plain JSON-shaped mappings (family -> level as text -> counts): they are read by
family and level, and written out as they are. The record's fields are the one list of what a report
holds; a reader asks for `report.train`, never `report["train"]`.

Reports outlive the build that wrote them: `CapabilityReport.of` reads any stored report. A field an
older report lacks (or holds as null) takes its default; a key this build does not know is kept in
`extra` and written back unchanged, so reading and saving a report never loses what it said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# family -> level (as text, the JSON key) -> {"n", "passed", "pass_rate", ...}
Cells = dict[str, dict[str, dict[str, Any]]]


@dataclass
class CapabilityReport:
    run_id: str = ""
    iteration: int | None = None  # None: a report saved without it (read as "the whole run")
    policy_version: int | None = None  # the version the held-out set evaluated; None: not evaluated
    # the held-out set (never steers the curriculum) and its trend over iterations
    heldout_pass_at_1: float | None = None
    heldout: Cells = field(default_factory=dict)
    trend: list[dict[str, Any]] = field(default_factory=list)  # {"iteration", "pass_at_1", "n"}
    regressions: list[dict[str, Any]] = field(default_factory=list)  # held-out cells down beyond noise
    regressions_within_noise: list[dict[str, Any]] = field(default_factory=list)
    regression_rule: str | None = None
    # practice: what steers the curriculum
    train: Cells = field(default_factory=dict)
    # tasks without a hint (the controller's mastery); None: a report written before it existed
    train_bare: Cells | None = None
    family_pass_rate: dict[str, float] = field(default_factory=dict)
    weak_families: list[str] = field(default_factory=list)  # weakest first
    band: dict[str, dict[str, int]] = field(default_factory=dict)  # family -> task status -> count, the run so far
    band_levels: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # this iteration's, per level
    failure_modes: dict[str, int] = field(default_factory=dict)
    infra_error_rate: float = 0.0
    rollouts: int = 0
    # syncs of this iteration the engine refused ({"policy_version", "reason", "checkpoint"}): its training
    # is not what serves (phases/train.py keeps it, and the next iteration trains on from it)
    refused_syncs: list[dict[str, Any]] = field(default_factory=list)
    capability: Cells = field(default_factory=dict)  # computed per family and level: modes, wrong commands
    habits: dict[str, Any] = field(default_factory=dict)  # agent_habits.habits of the iteration's practice
    demonstrations: dict[str, int] = field(default_factory=dict)
    self_proposal: dict[str, int] = field(default_factory=dict)
    model: dict[str, Any] | None = None  # which model: base, lineage, version described
    devset: dict[str, Any] | None = None  # the transfer dev set's block; None: not evaluated this iteration
    # evaluation.extra_sets measured this iteration (evaluate.extra_sets_block): per set its pass@1, interval,
    # exclusions and trend; empty: none configured (or a report written before they existed)
    extra_sets: list[dict[str, Any]] = field(default_factory=list)
    # the policy's own words, or why there are none (a text in parentheses)
    analysis: str = ""
    analysis_withheld: dict[str, str] | None = None  # {"text", "why"} when the analysis failed its check
    # added by the diagnose phase: what the next synthesis uses, and the held-out interval
    levels: dict[str, int] = field(default_factory=dict)
    mastered: dict[str, int] = field(default_factory=dict)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)  # tasks.difficulty.Decision.as_dict
    evaluation: dict[str, Any] | None = None  # evaluate.PassAtOne.as_dict of this iteration
    curve: list[dict[str, Any]] = field(default_factory=list)
    # learning_signal.LearningSignal.as_dict of the iteration (groups with signal, tokens trained of sampled,
    # entropy, the warm-start's figures); None: a report written before it existed, or the baseline's
    learning_signal: dict[str, Any] | None = None
    # tool_health.tool_health of the iteration's practice: per harness and family, turns calling a tool, parse
    # failures, prose where a call was expected, harness errors, side calls; None: a report written before it
    tool_health: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a newer build, kept as they were

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> CapabilityReport:
        """A report from its stored JSON (any build's); see the module's docstring."""
        data = dict(data or {})
        known: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "extra" or f.name not in data:
                continue
            value = data.pop(f.name)
            if value is not None or f.default is None:  # null where a table belongs: the table's default
                known[f.name] = value
        return cls(**known, extra=data)

    def as_dict(self) -> dict[str, Any]:
        """The report as stored (JSON-shaped); `of(r.as_dict())` gives `r` back."""
        out = asdict(self)
        return {**out.pop("extra"), **out}
