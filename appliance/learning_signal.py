"""The learning signal of an iteration: how much of what the policy practised could teach it anything.

GRPO learns only from a group whose members' rewards differ (a zero-variance group has advantage 0), and
only from the tokens of those groups' samples; a nearly deterministic policy (low entropy) gives every
member the same reward. So the figures that say whether an iteration can move the curve are:

- practice groups with signal of all groups (those with a valid rollout), the rest split into all passed
  (too easy for the policy now) and all failed (too hard), per family and level; and the same counted on
  each group's first `group_size` draws, before dynamic sampling drew more for groups without signal;
- tokens the RL step trained of the tokens the engine sampled in practice, and the SFT step's tokens;
- the policy's entropy: the trainer's mean per token over the RL step's samples, and beside it the mean
  −logprob of every token the engine sampled in practice (the engine records processed logprobs, i.e. at
  the sampling temperature, so this is a Monte-Carlo estimate of the sampling policy's entropy per token,
  over all groups, not only the trained ones);
- where the iteration ran the warm-start SFT, its figures (demonstrations, steps, tokens, loss).

Everything is read from what the store already holds: the iteration's practice rollouts and their model
calls, the `demonstrations` and `trained` events of the LEARN phase, and the trainer's metric rows of the
optimizer steps that phase took (global steps (global_step - steps, global_step] of its `trained` event).
`render_markdown` is the report's section; `summary_line` is the TUI's line.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.schemas import Event, Outcome, Rollout, RolloutStatus
from appliance.store import Store

# [signal, groups, all passed, all failed] per family and level (level as text: the report's JSON keys)
Cells = dict[str, dict[str, list[int]]]
ITERATION_PREFIX = re.compile(r"^iteration (\d+):")


@dataclass
class LearningSignal:
    iteration: int
    groups: int = 0  # practice groups with at least one valid (not infra-error) rollout
    signal_groups: int = 0  # ... whose valid rewards differ: the only ones GRPO learns from
    all_passed: int = 0  # zero-variance groups whose every valid rollout succeeded (too easy now)
    all_failed: int = 0  # ... failed (reward 0: too hard now); the rest scored one partial credit alike
    first_draw_signal: int = 0  # groups with signal on their first group_size draws alone
    extra_rollouts: int = 0  # rollouts beyond each group's first group_size (dynamic sampling)
    rollouts: int = 0  # finished practice rollouts
    cells: Cells = field(default_factory=dict)
    sampled_tokens: int = 0  # tokens the engine sampled in practice (answered calls)
    sampled_nll: float | None = None  # their mean -logprob (nats per token)
    rl_steps: int = 0
    rl_samples: int = 0
    rl_trained_tokens: int = 0
    entropy: float | None = None  # the trainer's, per trained token, over the RL steps' samples
    sft_steps: int = 0
    sft_tokens: int = 0
    sft_loss: float | None = None
    demonstrations: int = 0  # mixed into this iteration's SFT (or the warm-start's pool)
    warmstart: bool = False  # this iteration's LEARN was the warm-start SFT on demonstrations

    @property
    def signal_share(self) -> float | None:
        return self.signal_groups / self.groups if self.groups else None

    @property
    def trained_share(self) -> float | None:
        return self.rl_trained_tokens / self.sampled_tokens if self.sampled_tokens else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> LearningSignal:
        """From a report's stored block (any build's: unknown keys are ignored, missing ones default)."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def learning_signal(store: Store, run_id: str, iteration: int, group_size: int) -> LearningSignal:
    """The iteration's learning signal (see the module docstring); `group_size`: loop.group_size, the first
    draw of each group (practice names a group's rollouts `<group>.<k>`, k counting from 0)."""
    out = LearningSignal(iteration)
    rollouts = [r for r in store.rollouts(run_id, iteration=iteration, purpose="train")
                if r.status == RolloutStatus.FINISHED and r.group_id]
    _groups(store, run_id, rollouts, group_size, out)
    _sampled(store, rollouts, out)
    _trained(store, run_id, iteration, out)
    return out


def _groups(store: Store, run_id: str, rollouts: list[Rollout], group_size: int, out: LearningSignal) -> None:
    tasks = {t.id: t for t in store.tasks(run_id)} if rollouts else {}
    by_group: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_group[str(r.group_id)].append(r)
    out.rollouts = len(rollouts)
    cells: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for members in by_group.values():
        out.extra_rollouts += sum(_draw(r.id) >= group_size for r in members)
        valid = [r for r in members if r.outcome != Outcome.INFRA_ERROR and r.reward is not None]
        if not valid:
            continue  # the machine failed every member: no verdict either way
        rewards = {float(r.reward or 0.0) for r in valid}
        signal = len(rewards) > 1
        first = {float(r.reward or 0.0) for r in valid if _draw(r.id) < group_size}
        out.groups += 1
        out.signal_groups += signal
        out.first_draw_signal += len(first) > 1
        if not signal:
            out.all_passed += all(r.outcome == Outcome.SUCCESS for r in valid)
            out.all_failed += rewards == {0.0}
        task = tasks.get(valid[0].task_id or "")
        family, level = (task.family, str(task.difficulty)) if task else ("?", "?")
        cell = cells[family].setdefault(level, [0, 0, 0, 0])
        cell[0] += signal
        cell[1] += 1
        cell[2] += not signal and all(r.outcome == Outcome.SUCCESS for r in valid)
        cell[3] += not signal and rewards == {0.0}
    out.cells = dict(cells)


def _draw(rollout_id: str) -> int:
    """The draw index k of a practice rollout `<group>.<k>` (0 for an id without one)."""
    tail = rollout_id.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _sampled(store: Store, rollouts: list[Rollout], out: LearningSignal) -> None:
    nll, n = 0.0, 0
    for r in rollouts:
        for call in store.model_calls(r.id):
            if call.status != "ok":
                continue
            n += len(call.completion_ids)
            nll -= sum(call.logprobs)
    out.sampled_tokens = n
    out.sampled_nll = nll / n if n else None


def _iteration_of(e: Event) -> int | None:
    """An event's iteration: its data's, else the "iteration N:" its message starts with (older builds)."""
    if isinstance(e.data.get("iteration"), int):
        return int(e.data["iteration"])
    m = ITERATION_PREFIX.match(e.message)
    return int(m.group(1)) if m else None


def _trained(store: Store, run_id: str, iteration: int, out: LearningSignal) -> None:
    for e in store.events(run_id, kind="demonstrations", limit=100_000):
        if _iteration_of(e) == iteration:  # the phase's last attempt wins
            out.demonstrations = int(e.data.get("samples") or 0)
            out.warmstart = bool(e.data.get("warmstart"))
    trained = [e for e in store.events(run_id, kind="train", limit=100_000)
               if e.message == "trained" and e.data.get("iteration") == iteration and "global_step" in e.data]
    if not trained:
        return  # nothing trained (no signal, nothing to train on, or not yet)
    last = int(trained[-1].data["global_step"])
    first = last - int(trained[-1].data.get("steps") or 0)

    def series(name: str) -> dict[int, float]:
        found: dict[int, float] = {}
        for step, value in store.metric_series(run_id, name):
            if first < step <= last:
                found.setdefault(step, value)  # a step's own row comes first (a skipped phase may add one later)
        return found

    trained_tokens, entropy, samples = series("trained_tokens"), series("entropy"), series("samples")
    rl = [s for s in trained_tokens if s in samples]  # GRPO steps (an SFT step records no samples)
    out.rl_steps = len(rl)
    out.rl_samples = int(sum(samples[s] for s in rl))
    out.rl_trained_tokens = int(sum(trained_tokens[s] for s in rl))
    weighted = [(trained_tokens[s], entropy[s]) for s in rl if s in entropy and trained_tokens[s] > 0]
    if weighted:
        out.entropy = sum(w * v for w, v in weighted) / sum(w for w, _ in weighted)
    sft_steps, sft_tokens, sft_loss = series("sft_steps"), series("sft_tokens"), series("sft_loss")
    out.sft_steps = int(sum(sft_steps.values()))
    out.sft_tokens = int(sum(sft_tokens.values()))
    out.sft_loss = sum(sft_loss.values()) / len(sft_loss) if sft_loss else None


def _k(n: float) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else f"{n:.0f}"


def _share(part: float | None) -> str:
    return "n/a" if part is None else f"{part:.0%}"


def render_markdown(block: dict[str, Any] | None) -> list[str]:
    """The report's "Learning signal" section (no lines for a report without the block)."""
    if not block:
        return []
    s = LearningSignal.of(block)
    lines = ["", "## Learning signal", ""]
    if s.groups:
        lines.append(f"- practice groups with signal: **{s.signal_groups} of {s.groups}** ({_share(s.signal_share)}); "
                     f"without: {s.all_passed} all passed, {s.all_failed} all failed, "
                     f"{s.groups - s.signal_groups - s.all_passed - s.all_failed} other; "
                     f"{s.first_draw_signal} had signal at their first draw ({s.extra_rollouts} extra rollouts)")
    else:
        lines.append("- no practice this iteration" + (" (the warm-start SFT came first)" if s.warmstart else ""))
    if s.sampled_tokens or s.rl_steps:
        lines.append(f"- RL: trained **{_k(s.rl_trained_tokens)} of {_k(s.sampled_tokens)} tokens** sampled in "
                     f"practice ({_share(s.trained_share)}), {s.rl_samples} samples in {s.rl_steps} steps")
    if s.sft_steps:
        what = "warm-start SFT" if s.warmstart else "SFT (successes and demonstrations)"
        loss = "" if s.sft_loss is None else f", loss {s.sft_loss:.3f}"
        lines.append(f"- {what}: {_k(s.sft_tokens)} tokens in {s.sft_steps} steps, {s.demonstrations} "
                     f"demonstrations{loss}")
    if s.entropy is not None or s.sampled_nll is not None:
        trainer = "n/a" if s.entropy is None else f"{s.entropy:.3f}"
        engine = "n/a" if s.sampled_nll is None else f"{s.sampled_nll:.3f}"
        lines.append(f"- entropy: **{trainer}** nats per token over the RL step's samples (trainer); {engine} mean "
                     "-logprob of the tokens sampled in practice (engine)")
    if s.cells:
        levels = sorted({lvl for cells in s.cells.values() for lvl in cells}, key=lambda v: (not v.isdigit(), v))
        lines += ["", "| groups with signal | " + " | ".join(f"L{lvl}" for lvl in levels) + " |",
                  "|---" * (len(levels) + 1) + "|"]
        for family in sorted(s.cells):
            row = [s.cells[family].get(lvl) for lvl in levels]
            lines.append(f"| {family} | " + " | ".join(f"{c[0]}/{c[1]}" if c else "" for c in row) + " |")
    return lines


def render_table(blocks: list[dict[str, Any]]) -> list[str]:
    """One Markdown table row per iteration's block: the curve of the learning signal (the HTML report's)."""
    if not blocks:
        return []
    lines = ["| iteration | groups with signal | all passed / all failed | RL tokens trained / sampled | SFT tokens "
             "(steps) | entropy (trainer) | sampled -logprob (engine) |", "|---" * 7 + "|"]
    for block in blocks:
        s = LearningSignal.of(block)
        groups = f"{s.signal_groups}/{s.groups} ({_share(s.signal_share)})" if s.groups else "no practice"
        sft = f"{_k(s.sft_tokens)} ({s.sft_steps})" + (" warm-start" if s.warmstart else "") if s.sft_steps else ""
        lines.append(" | ".join([
            f"| {s.iteration}", groups, f"{s.all_passed} / {s.all_failed}" if s.groups else "",
            f"{_k(s.rl_trained_tokens)} / {_k(s.sampled_tokens)}" if s.sampled_tokens or s.rl_steps else "", sft,
            "" if s.entropy is None else f"{s.entropy:.3f}",
            "" if s.sampled_nll is None else f"{s.sampled_nll:.3f}"]) + " |")
    return lines


def summary_line(block: dict[str, Any] | None) -> str | None:
    """One line for the TUI: `it 2: signal 14/33 groups · RL 4.4k/25.1k tok · SFT 12.0k tok · entropy 0.035`."""
    if not block:
        return None
    s = LearningSignal.of(block)
    parts = [f"it {s.iteration}: signal {s.signal_groups}/{s.groups} groups" if s.groups
             else f"it {s.iteration}: no practice"]
    if s.sampled_tokens or s.rl_steps:
        parts.append(f"RL {_k(s.rl_trained_tokens)}/{_k(s.sampled_tokens)} tok")
    if s.sft_steps:
        parts.append(f"warm-start on {s.demonstrations} demos {_k(s.sft_tokens)} tok" if s.warmstart
                     else f"SFT {_k(s.sft_tokens)} tok")
    if s.entropy is not None:
        parts.append(f"entropy {s.entropy:.3f}")
    elif s.sampled_nll is not None:
        parts.append(f"sampled -logp {s.sampled_nll:.3f}")
    return " · ".join(parts)
