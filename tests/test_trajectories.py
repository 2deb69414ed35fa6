"""The prefix-tree builder: chains merge, rewritten histories branch, no sampled token is lost or doubled."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.errors import TrajectoryError
from appliance.schemas import ModelCall
from appliance.trajectories import build_samples, build_tree

IM_START, IM_END, NL = 1, 2, 10
_lp = itertools.count(1)


def call(seq: int, prompt: list[int], completion: list[int], *, status: str = "ok", version: int = 3,
         rollout: str = "r1") -> ModelCall:
    # unique logprobs identify every sampled token wherever it ends up
    logprobs = [-next(_lp) / 1024 for _ in completion]
    return ModelCall(None, rollout, seq, status, {}, None, list(prompt), list(completion), logprobs, version, 0.1)


def turn(role: int, *content: int) -> list[int]:
    """A ChatML turn as the template renders it: <|im_start|>role\\n content <|im_end|>\\n."""
    return [IM_START, role, NL, *content, IM_END, NL]


def samples_of(calls: list[ModelCall]):
    return build_samples(calls, rollout_id="r1", group_id="g1")


def sampled_ids(sample) -> list[int]:
    return [t for t, m in zip(sample.token_ids, sample.mask) if m]


SYSTEM = turn(100, 11, 12, 13)
USER = turn(101, 21, 22)
GEN = [IM_START, 102, NL]  # the generation prompt


def chain(turns: int = 3) -> list[ModelCall]:
    """A multi-turn agent: each prompt re-renders the whole history, the engine's <|im_end|> included."""
    calls, history = [], SYSTEM + USER
    for i in range(turns):
        prompt = history + GEN
        completion = [50 + i, 51 + i, IM_END]
        calls.append(call(i, prompt, completion))
        history = prompt + completion + [NL] + turn(101, 60 + i)  # observation as the next user turn
    return calls


def test_multi_turn_chain_is_one_sample_with_the_concatenated_completions():
    calls = chain(4)
    samples, report = samples_of(calls)
    assert len(samples) == 1 and report.branches == 1 and report.divergences == []
    (s,) = samples
    assert sampled_ids(s) == [t for c in calls for t in c.completion_ids]
    assert [lp for lp, m in zip(s.logprobs, s.mask) if m] == [lp for c in calls for lp in c.logprobs]
    assert s.token_ids[: len(calls[-1].prompt_ids)] == calls[-1].prompt_ids
    assert (s.group_id, s.policy_version, s.branch) == ("g1", 3, 0)  # its reward is the rollout's
    assert report.sampled_tokens == 12 and report.retokenized_tokens == 0


def test_template_that_rerenders_the_end_of_turn_branches_and_reports_it():
    # the engine sampled "... <|im_end|>" but the next prompt renders the turn with a different closer
    first = call(0, SYSTEM + USER + GEN, [50, 51, IM_END])
    rerendered = SYSTEM + USER + GEN + [50, 51, 99, NL] + turn(101, 60) + GEN
    second = call(1, rerendered, [52, IM_END])
    samples, report = samples_of([first, second])
    assert report.branches == 2 and len(samples) == 2
    (d,) = report.divergences
    fork = len(SYSTEM + USER + GEN) + 2
    assert (d.call_seq, d.parent, d.branch, d.position) == (1, 0, 1, fork)
    assert (d.discarded, d.discarded_sampled, d.rerendered) == (1, 1, len(rerendered) - fork)
    # 50 and 51 are trained once, in the first branch; the second branch keeps them as context
    assert sampled_ids(samples[0]) == [50, 51, IM_END]
    assert sampled_ids(samples[1]) == [52, IM_END]
    assert samples[1].token_ids[:fork] == samples[0].token_ids[:fork]


def test_compaction_branches_from_the_system_prompt():
    calls = chain(3)
    compacted = SYSTEM + turn(101, 77, 78) + GEN  # the history replaced by a summary
    calls.append(call(3, compacted, [55, IM_END]))
    calls.append(call(4, compacted + [55, IM_END, NL] + turn(101, 61) + GEN, [56, IM_END]))
    samples, report = samples_of(calls)
    assert report.branches == 2
    (d,) = report.divergences
    assert d.call_seq == 3 and d.position == len(SYSTEM) + 3  # "<|im_start|>user\n" is shared too
    assert sampled_ids(samples[0]) == [t for c in calls[:3] for t in c.completion_ids]
    assert sampled_ids(samples[1]) == [55, IM_END, 56, IM_END]
    assert d.discarded_sampled == 9


def test_retry_of_a_turn_is_a_sibling_branch():
    calls = chain(2)
    calls.append(call(2, calls[1].prompt_ids, [70, IM_END]))  # the harness retried the second turn
    calls.append(call(3, calls[2].prompt_ids + [70, IM_END, NL] + turn(101, 71) + GEN, [72, IM_END]))
    samples, report = samples_of(calls)
    (d,) = report.divergences
    assert (d.position, d.discarded, d.discarded_sampled, d.rerendered) == (len(calls[1].prompt_ids), 3, 3, 0)
    assert sampled_ids(samples[0]) == calls[0].completion_ids + calls[1].completion_ids
    assert sampled_ids(samples[1]) == [70, IM_END, 72, IM_END]  # the first turn is context here


def test_interleaved_sub_agent_calls_become_their_own_chain():
    main, sub = SYSTEM + USER + GEN, turn(100, 90) + turn(101, 91) + GEN
    calls = [
        call(0, main, [50, IM_END]),
        call(1, sub, [92, IM_END]),
        call(2, main + [50, IM_END, NL] + turn(101, 60) + GEN, [51, IM_END]),
        call(3, sub + [92, IM_END, NL] + turn(101, 93) + GEN, [94, IM_END]),
    ]
    samples, report = samples_of(calls)
    assert report.branches == 2 and len(report.divergences) == 1
    assert report.divergences[0].position == 3  # only "<|im_start|>system\n" is shared
    assert sampled_ids(samples[0]) == [50, IM_END, 51, IM_END]
    assert sampled_ids(samples[1]) == [92, IM_END, 94, IM_END]
    tree = build_tree(calls)
    assert [s.call_seq for s in tree.branches[1].segments] == [1, 3]


def test_failed_calls_are_skipped_and_counted():
    calls = chain(2)
    calls.insert(1, call(5, [1, 2, 3], [], status="error"))
    samples, report = samples_of(calls)
    assert report.skipped_calls == 1 and report.calls == 2 and len(samples) == 1


def test_oldest_policy_version_of_a_branch_is_its_version():
    calls = chain(2)
    calls[1].policy_version = 4
    samples, report = samples_of(calls)
    assert samples[0].policy_version == 3 and report.policy_versions == [3, 4]


def test_calls_out_of_order_are_placed_by_seq():
    assert samples_of(list(reversed(chain(3))))[1].branches == 1


@pytest.mark.parametrize("broken, fix", [
    (lambda cs: setattr(cs[0], "logprobs", []), "logprobs=True"),
    (lambda cs: setattr(cs[1], "seq", 0), "own seq"),
    (lambda cs: setattr(cs[1], "rollout_id", "other"), "one tree per rollout"),
])
def test_malformed_calls_are_refused_with_a_hint(broken, fix):
    calls = chain(2)
    broken(calls)
    with pytest.raises(TrajectoryError) as e:
        samples_of(calls)
    assert fix in e.value.hint


def test_no_calls_no_samples():
    samples, report = samples_of([])
    assert samples == [] and report.branches == 0


# --- properties ------------------------------------------------------------------------------------

tokens = st.lists(st.integers(0, 4), max_size=6)  # a tiny alphabet provokes accidental shared prefixes
ops = st.lists(
    st.tuples(st.sampled_from(["continue", "continue", "retry", "fresh", "error"]), st.integers(0, 10**6),
              tokens, tokens),
    max_size=25,
)


def rollout_from(ops_) -> list[ModelCall]:
    """A harness that continues, retries or compacts any conversation it has seen, or starts a new one."""
    calls, paths = [], [[]]
    for seq, (kind, pick, context, completion) in enumerate(ops_):
        path = paths[pick % len(paths)]
        if kind == "retry":
            path = path[: pick % (len(path) + 1)]
        elif kind == "fresh":
            path = []
        prompt = path + context
        if kind == "error":
            calls.append(call(seq, prompt, [], status="error"))
            continue
        calls.append(call(seq, prompt, completion))
        paths.append(prompt + completion)
    return calls


@settings(max_examples=300, deadline=None)
@given(ops)
def test_every_sampled_token_is_trained_exactly_once_in_the_context_the_engine_saw(ops_):
    calls = rollout_from(ops_)
    samples, report = samples_of(calls)
    ok = [c for c in calls if c.status == "ok"]
    where = {lp: (c.seq, i, t) for c in ok for i, (t, lp) in enumerate(zip(c.completion_ids, c.logprobs))}
    trained = []
    for s in samples:
        assert len(s.token_ids) == len(s.mask) == len(s.logprobs)
        for t, m, lp in zip(s.token_ids, s.mask, s.logprobs):
            assert m in (0, 1)
            if m:
                seq, i, token = where[lp]
                assert token == t
                trained.append((seq, i))
            else:
                assert lp == 0.0
    assert sorted(trained) == sorted((seq, i) for seq, i, _ in where.values())  # none lost, none twice
    for c in ok:
        if c.completion_ids:
            (s,) = [s for s in samples if c.logprobs[0] in s.logprobs]
            n = len(c.prompt_ids) + len(c.completion_ids)
            assert s.token_ids[:n] == c.prompt_ids + c.completion_ids
    assert report.sampled_tokens == sum(len(c.completion_ids) for c in ok)
    assert report.branches == len(report.divergences) + (1 if ok else 0)
    assert report.retokenized_tokens == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(tokens, tokens), min_size=1, max_size=15))
def test_a_pure_chain_is_always_one_branch(turns):
    calls, history = [], []
    for seq, (context, completion) in enumerate(turns):
        calls.append(call(seq, history + context, completion))
        history = history + context + completion
    samples, report = samples_of(calls)
    assert report.branches == 1 and report.divergences == []
    assert [t for s in samples for t in sampled_ids(s)] == [t for c in calls for t in c.completion_ids]


def test_a_sample_carries_its_sampling_temperature():
    from dataclasses import replace

    first = replace(call(0, SYSTEM + USER, [31, 32, IM_END]), temperature=0.7)
    second = replace(call(1, SYSTEM + USER + [31, 32, IM_END, NL] + USER, [41, IM_END]), temperature=0.7)
    (sample,), report = samples_of([first, second])
    assert sample.temperature == 0.7 and report.other_temperature_tokens == 0
    greedy = replace(call(0, SYSTEM + USER, [31, IM_END]), temperature=0.0)
    assert samples_of([greedy])[0][0].temperature == 1.0  # the engine's greedy logprobs are unscaled
    assert samples_of([call(0, SYSTEM + USER, [31, IM_END])])[0][0].temperature == 1.0  # not recorded


def test_tokens_sampled_at_another_temperature_are_context_not_trained():
    from dataclasses import replace

    first = replace(call(0, SYSTEM + USER, [31, 32, IM_END]), temperature=0.7)
    hot = replace(call(1, SYSTEM + USER + [31, 32, IM_END, NL] + USER, [41, IM_END]), temperature=1.2)
    (sample,), report = samples_of([first, hot])
    assert sampled_ids(sample) == [31, 32, IM_END] and sample.temperature == 0.7
    assert report.other_temperature_tokens == 2
    assert sample.token_ids[-2:] == [41, IM_END] and sample.logprobs[-2:] == [0.0, 0.0]


@pytest.mark.parametrize(("name", "branches"), [("qwen2_5", 1), ("qwen3", 3), ("gemma3", 1), ("phi3_5", 1)])
def test_real_templates_branch_only_where_they_rewrite_history(tmp_path, name, branches):
    """A three-turn episode as the engine sees it under each family's real template: every prompt is the
    template's rendering of the history, every completion the answer the model samples (its end-of-turn token
    included). Prefix-stable templates give one sample; Qwen3, which re-renders earlier turns without their
    `<think>` block, a branch per turn; either way every sampled token is trained exactly once."""
    from appliance.config import load_settings
    from appliance.serving.template import ChatTemplate
    from tiny_model import FAMILIES, make_family_tokenizer  # tests/tiny_model.py

    bundled = load_settings().model_path
    if not (bundled / "tokenizer.json").exists():
        pytest.skip(f"the bundled model is not converted at {bundled}: run scripts/setup")
    make_family_tokenizer(tmp_path, FAMILIES[name], bundled)
    template = ChatTemplate(tmp_path)
    messages = [{"role": "system", "content": "You run shell commands."}, {"role": "user", "content": "Task: go"}]
    calls = []
    for i, said in enumerate(["```bash\nls\n```", "```bash\ncat a\n```", "DONE"]):
        prompt, answer = template.answer(messages + [{"role": "assistant", "content": said}], len(messages), None)
        calls.append(call(i, prompt, answer))
        messages += [{"role": "assistant", "content": said}, {"role": "user", "content": f"exit code 0\nout {i}"}]
    samples, report = samples_of(calls)
    assert len(samples) == branches and len(report.divergences) == branches - 1
    assert sorted(t for s in samples for t in sampled_ids(s)) == sorted(t for c in calls for t in c.completion_ids)
    for c in calls:  # the sample that trains a call's completion starts with exactly what the engine saw
        whole = c.prompt_ids + c.completion_ids
        assert any(s.token_ids[: len(whole)] == whole and all(s.mask[len(c.prompt_ids): len(whole)]) for s in samples)
