"""The pure parts of the screens: trajectory placement, sparklines, GPU lines, phase timeline."""

from __future__ import annotations

import pytest

from appliance.errors import TrajectoryError
from appliance.schemas import Event, Iteration, IterationStatus, ModelCall, Phase
from appliance.tui.overview import phase_timeline, sparkline
from appliance.tui.system import parse_nvidia_smi
from appliance.tui.trajectory import call_views, render


def call(seq: int, prompt: list[int], completion: list[int]) -> ModelCall:
    return ModelCall(None, "r", seq, "ok", {}, None, prompt, completion, [-0.5] * len(completion), 0, 0.1)


def test_calls_that_extend_each_other_share_history_and_a_rewrite_branches() -> None:
    views = call_views([call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 5, 6, 7], [8]),
                        call(2, [1, 2, 9], [10])])
    assert [(v.parent, v.shared, v.branch) for v in views] == [(None, 0, False), (0, 5, False), (1, 2, True)]
    assert views[1].new_prompt == (6, 7) and views[1].sampled == (8,)
    text = render(views, lambda ids: [f"<{i}>" for i in ids]).plain
    assert "⑂ branch: leaves call 1's sequence after 2 tokens" in text
    assert "<6><7>" in text and "<9>" in text


def test_a_side_call_is_shown_as_its_own_untrained_branch_not_a_rewrite() -> None:
    # side calls became branches of the tree (98824b2, issue 48); the screen called a summary's branch "history
    # rewritten" and showed its tokens in the trained style
    summary = ModelCall(None, "r", 2, "side", {}, None, [1, 2, 3, 4, 5, 6], [40], [-0.5], 0, 0.1)
    views = call_views([call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 5, 6, 7], [8]), summary])
    assert [(v.side, v.branch) for v in views] == [(False, False), (False, False), (True, True)]
    text = render(views, lambda ids: [f"<{i}>" for i in ids]).plain
    assert "side branch: starts from call 1's sequence after 6 tokens (no history rewritten)" in text
    assert "recorded, not trained" in text and "(history rewritten)" not in text


def test_a_failed_call_is_outside_the_tree_and_its_retry_continues_the_last_call_that_worked() -> None:
    # placed as the trainer's prefix tree places them (trajectories.build_tree), so the view never shows
    # a retry hanging off a call that training leaves out
    failed = ModelCall(None, "r", 1, "error", {}, None, [1, 2, 3, 4], [], [], 0, 0.1, "engine: 500")
    calls = [call(0, [1, 2], [3]), failed, call(2, [1, 2, 3, 4], [5])]
    views = call_views(calls)
    assert [(v.parent, v.shared, v.branch, v.in_tree) for v in views] == [
        (None, 0, False, True), (None, 0, False, False), (0, 3, False, True)]
    assert views[2].new_prompt == (4,) and views[1].new_prompt == ()
    assert "not in the prefix tree" in render(views, None).plain and "engine: 500" in render(views, None).plain


def test_calls_that_do_not_fit_together_are_refused_as_the_trainer_refuses_them() -> None:
    broken = ModelCall(None, "r", 0, "ok", {}, None, [1], [2, 3], [-0.5], 0, 0.1)  # one logprob for two ids
    with pytest.raises(TrajectoryError):
        call_views([broken])


def test_sparkline_spans_the_range() -> None:
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([2.0, 2.0]) == "▅▅"


def test_nvidia_smi_lines_and_unreadable_boards() -> None:
    out = "0, 87, 71680, 143771\n1, [N/A], [N/A], 143771\n"
    assert parse_nvidia_smi(out) == ["GPU0 87% 70/140 GiB"]


def test_phase_timeline_durations_current_and_future() -> None:
    it = Iteration(1, "r", 0, Phase.PRACTISE, IterationStatus.RUNNING, 0, 100.0)
    events = [Event("phase", "synthesize", "r", {"iteration": 0}, created_at=100.0),
              Event("phase", "validate", "r", {"iteration": 0}, created_at=140.0),
              Event("phase", "practise", "r", {"iteration": 0}, created_at=205.0)]
    line = phase_timeline(it, events, now=215.0)
    assert line.markup.startswith("synthesize 40s › validate 1m05s › [reverse] practise 10s [/reverse] › "
                                  "[dim]train[/dim]")


def test_a_finished_phase_keeps_its_duration_while_the_loop_waits() -> None:
    """Paused after evaluate: evaluate took 20 s however long the loop then waits before diagnose."""
    it = Iteration(1, "r", 0, Phase.DIAGNOSE, IterationStatus.RUNNING, 0, 100.0)
    events = [Event("phase", "evaluate", "r", {"iteration": 0}, created_at=100.0)]
    line = phase_timeline(it, events, now=500.0, done={"evaluate": 20.0})
    assert "evaluate 20s › [reverse] diagnose [/reverse]" in line.markup
    assert "evaluate 6m40s" in phase_timeline(it, events, now=500.0).plain  # what the starts alone would say


def test_the_bundled_tokenizer_decodes_token_by_token(tmp_path) -> None:
    from appliance.config import load_settings
    from appliance.tui.trajectory import tokenizer_decoder

    model = load_settings().model_path  # converted by scripts/setup (`appliance init`)
    decode = tokenizer_decoder(model)
    assert decode is not None, f"no tokenizer in {model}: run scripts/setup"
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(model))("echo hello > out.txt")["input_ids"]
    assert "".join(decode(ids)) == "echo hello > out.txt"
    assert tokenizer_decoder(tmp_path) is None  # a folder without a tokenizer: ids are shown


def test_the_overview_shows_the_last_steps_signal(store) -> None:
    from appliance.tui.overview import learning_line

    assert "no data yet" in learning_line(store, "run").plain
    store.add_metrics("run", 1, {"groups_with_signal": 3, "valid_groups": 8, "clip_ratio": 0.04,
                                 "logprob_gap_mean": 0.0012, "entropy": 1.25, "truncated_tokens": 17,
                                 "turns_mean": 2.5, "response_tokens_mean": 34.5})
    line = learning_line(store, "run").markup
    assert "signal [bold]3[/bold]/8 groups" in line and "clip 0.04" in line and "IS gap 0.001" in line
    assert "entropy 1.25" in line and "cut 17 tok" in line and "2.5 turns" in line and "34 tok/reply" in line


def test_the_overview_counts_the_training_steps_of_the_live_loop(store) -> None:
    """Issue 52: the phase's progress on the TUI: a training phase's steps done of its total (the live loop's
    heartbeat), nothing from a loop that is not alive or not training."""
    import time

    from appliance.tui.overview import training_steps

    assert training_steps(store, "run").plain == ""  # no loop
    progress = {"phase": "train", "iteration": 1, "steps_done": 3, "steps_total": 8, "left_s": 75.0}
    store.beat("run", 1, time.time(), progress)
    assert training_steps(store, "run").plain == "  training step 3/8 · about 1m15s left"
    store.beat("run", 1, time.time(), {**progress, "phase": "evaluate", "steps_total": 0})
    assert training_steps(store, "run").plain == ""
