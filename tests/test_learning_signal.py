"""The learning signal of an iteration (issue 54): groups with signal, tokens trained of sampled, entropy, the
warm-start's figures; in the stored report, its Markdown, and read from older reports."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.learning_signal import LearningSignal, learning_signal, render_markdown, summary_line
from appliance.loop import Loop
from appliance.phases.diagnose import diagnose
from appliance.schemas import (
    CapabilityReport,
    Event,
    ModelCall,
    Outcome,
    Rollout,
    RolloutStatus,
    Split,
    Task,
    TaskStatus,
)
from appliance.store import Store

RUN = "r"


def _task(store: Store, task_id: str, family: str, level: int) -> None:
    store.add_task(Task(task_id, RUN, family, level, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}, iteration=2))


def _group(store: Store, task_id: str, outcomes: list[Outcome], iteration: int = 2) -> None:
    """A practice group as PRACTISE names it: rollouts `<task>.g<it>.<k>`; reward 1 for a success."""
    group = f"{task_id}.g{iteration}"
    for k, outcome in enumerate(outcomes):
        rid = f"{group}.{k}"
        store.add_rollout(Rollout(rid, RUN, task_id, group, iteration, "builtin", 1, RolloutStatus.PENDING, "train"))
        store.start_rollout(rid)
        store.finish_rollout(rid, outcome, 1.0 if outcome == Outcome.SUCCESS else 0.0)


S, F, X = Outcome.SUCCESS, Outcome.FAILURE, Outcome.INFRA_ERROR


def _practice(store: Store) -> None:
    store.create_run(RUN, {})
    for tid, family, level in (("a", "files", 2), ("b", "files", 2), ("c", "text", 3), ("d", "text", 3),
                               ("e", "git", 2)):
        _task(store, tid, family, level)
    _group(store, "a", [S, F, S, S])  # signal at once
    _group(store, "b", [S, S, S, S])  # all passed
    _group(store, "c", [F, F, F, F, F, F, F, F])  # all failed, after dynamic sampling's 4 extra
    _group(store, "d", [F, F, F, F, S, F, F, F])  # signal only thanks to the extra draws
    _group(store, "e", [X, X, X, X])  # the machine failed: no verdict, not a group
    # two answered calls and a failed one on a rollout of group a: 5 sampled tokens
    store.add_model_call(ModelCall(None, "a.g2.0", 0, "ok", {}, None, [1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], 1, 0.1))
    store.add_model_call(ModelCall(None, "a.g2.0", 1, "ok", {}, None, [1, 2, 3], [6, 7], [-0.4, -0.5], 1, 0.1))
    store.add_model_call(ModelCall(None, "a.g2.0", 2, "error", {}, None, [1], [9], [-9.0], 1, 0.1, error="boom"))


def _training(store: Store) -> None:
    """Iteration 1's warm-start (steps 1) and iteration 2's LEARN (SFT at step 2, GRPO at 3 and 4), as recorded."""
    store.add_event(Event("demonstrations", "iteration 1: warm-start SFT on 40 demonstrations (0 new)", RUN,
                          {"warmstart": True, "samples": 40, "hindsight": 0}))  # an older build: no data.iteration
    store.add_metrics(RUN, 1, {"sft_loss": 0.9, "sft_steps": 20, "sft_tokens": 4000})
    store.add_event(Event("train", "trained", RUN, {"iteration": 1, "steps": 1, "global_step": 1}))
    store.add_metrics(RUN, 1, {"pause_s": 0.1, "train_s": 3.0})  # the phase's timings, at its last step
    store.add_event(Event("demonstrations", "iteration 2: mixed in 8 demonstrations (2 new)", RUN,
                          {"iteration": 2, "warmstart": False, "samples": 8, "hindsight": 2}))
    store.add_metrics(RUN, 2, {"sft_loss": 0.4, "sft_steps": 3, "sft_tokens": 600})
    store.add_metrics(RUN, 3, {"samples": 8, "trained_tokens": 300, "entropy": 0.05, "groups_with_signal": 1})
    store.add_metrics(RUN, 4, {"samples": 8, "trained_tokens": 100, "entropy": 0.01, "groups_with_signal": 1})
    store.add_event(Event("train", "trained", RUN, {"iteration": 2, "steps": 3, "global_step": 4}))
    # a later iteration with no signal records its batch's counts at the last step taken: not iteration 2's
    store.add_metrics(RUN, 4, {"groups_with_signal": 0, "samples": 99, "trained_tokens": 999, "skipped_steps": 1})


def test_groups_with_signal_counts_only_groups_whose_rewards_differ(store: Store) -> None:
    _practice(store)
    s = learning_signal(store, RUN, 2, group_size=4)
    assert (s.groups, s.signal_groups, s.all_passed, s.all_failed) == (4, 2, 1, 1)
    assert s.first_draw_signal == 1 and s.extra_rollouts == 8  # d found its signal in the extra draws
    assert s.cells == {"files": {"2": [1, 2, 1, 0]}, "text": {"3": [1, 2, 0, 1]}}  # signal, groups, all +, all -
    assert s.sampled_tokens == 5 and s.sampled_nll == pytest.approx(0.3)  # the failed call is not counted
    assert s.rollouts == 28


def test_tokens_trained_entropy_and_sft_are_the_iterations_own_steps(store: Store) -> None:
    _practice(store)
    _training(store)
    s = learning_signal(store, RUN, 2, group_size=4)
    assert (s.rl_steps, s.rl_samples, s.rl_trained_tokens) == (2, 16, 400)
    assert s.entropy == pytest.approx((300 * 0.05 + 100 * 0.01) / 400)  # per trained token over both steps
    assert (s.sft_steps, s.sft_tokens, s.sft_loss, s.demonstrations, s.warmstart) == (3, 600, 0.4, 8, False)
    warm = learning_signal(store, RUN, 1, group_size=4)
    assert (warm.warmstart, warm.demonstrations, warm.sft_steps, warm.sft_tokens, warm.rl_steps) == (
        True, 40, 20, 4000, 0)
    assert warm.groups == 0 and warm.entropy is None


def test_the_section_and_the_tui_line_say_the_figures(store: Store) -> None:
    _practice(store)
    _training(store)
    block = learning_signal(store, RUN, 2, group_size=4).as_dict()
    md = "\n".join(render_markdown(block))
    assert "practice groups with signal: **2 of 4** (50%); without: 1 all passed, 1 all failed" in md
    assert "1 had signal at their first draw (8 extra rollouts)" in md
    assert "trained **400 of 5 tokens**" in md  # (a toy store: more trained than the calls recorded)
    assert "entropy: **0.040** nats per token" in md and "0.300 mean -logprob" in md
    assert "| files | 1/2 |  |" in md
    assert summary_line(block) == "it 2: signal 2/4 groups · RL 400/5 tok · SFT 600 tok · entropy 0.040"
    warm = "\n".join(render_markdown(learning_signal(store, RUN, 1, group_size=4).as_dict()))
    assert "no practice this iteration (the warm-start SFT came first)" in warm
    assert "warm-start SFT: 4.0k tokens in 20 steps, 40 demonstrations, loss 0.900" in warm
    assert render_markdown(None) == [] and summary_line(None) is None


def test_older_reports_read_without_the_block_and_a_newer_blocks_keys_are_ignored() -> None:
    old = CapabilityReport.of({"iteration": 3, "rollouts": 10})
    assert old.learning_signal is None
    assert LearningSignal.of({"iteration": 3, "groups": 2, "from_a_newer_build": 1}).groups == 2


def test_diagnose_stores_the_block_and_its_section(settings: Settings, store: Store) -> None:
    settings.loop.families = ["files", "text"]
    settings.loop.heldout_levels = [2]
    settings.loop.heldout_per_cell = 1
    settings.loop.analysis = False
    engine = SimpleNamespace(policy_version=0, base_url="http://unused", model_name=lambda: "policy")
    lp = Loop(settings, store, engine, practice=None, log=lambda _: None)
    run = lp.run.id
    store.start_iteration(run, 1, 0)
    store.add_task(Task("t", run, "files", 2, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}, iteration=1))
    for k, outcome in enumerate([S, F, F, F]):
        rid = f"t.g1.{k}"
        store.add_rollout(Rollout(rid, run, "t", "t.g1", 1, "builtin", 0, RolloutStatus.PENDING, "train"))
        store.start_rollout(rid)
        store.finish_rollout(rid, outcome, float(outcome == S))
    diagnose(lp.context, 1)
    report, md = store.report(run, 1)
    assert report.learning_signal is not None
    assert (report.learning_signal["groups"], report.learning_signal["signal_groups"]) == (1, 1)
    assert "## Learning signal" in md and "**1 of 1**" in md
    assert md.index("## Learning signal") < md.index("## The policy's own analysis")


def test_the_html_report_has_the_learning_signal_of_each_iteration_up_to_its_own(store: Store, tmp_path) -> None:
    from appliance.report_html import render_page

    store.create_run(RUN, {})
    blocks = [LearningSignal(1, warmstart=True, demonstrations=405, sft_steps=51, sft_tokens=24_300),
              LearningSignal(2, groups=33, signal_groups=14, all_passed=12, all_failed=7, sampled_tokens=25_100,
                             rl_steps=2, rl_trained_tokens=4_400, entropy=0.035, sampled_nll=0.041, sft_steps=105,
                             sft_tokens=12_000),
              LearningSignal(3, groups=39, signal_groups=8)]
    for s in blocks:
        store.save_report(RUN, s.iteration, CapabilityReport(iteration=s.iteration, learning_signal=s.as_dict()), "#")
    report, md = store.report(RUN, 2)
    page = render_page(store, RUN, report, md)
    assert '<h2 id="signal">Learning signal per iteration</h2>' in page
    assert "<td>1</td><td>no practice</td><td></td><td></td><td>24.3k (51) warm-start</td>" in page
    assert "<td>2</td><td>14/33 (42%)</td><td>12 / 7</td><td>4.4k / 25.1k</td><td>12.0k (105)</td><td>0.035</td>" \
        "<td>0.041</td>" in page
    assert "<td>3</td>" not in page  # the page of iteration 2 stops there
    old, old_md = CapabilityReport(iteration=2), "#"
    assert 'id="signal"' not in render_page(store, "other", old, old_md)  # reports without the block: no section
