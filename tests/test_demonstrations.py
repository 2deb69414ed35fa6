"""Demonstrations: reference solutions run through the harness's formatting in real sandboxes, stored for SFT."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.demonstrations import (
    FINISH,
    REFERENCE,
    command_block,
    demonstrate,
    demonstrate_tasks,
    pick_demonstrations,
    spread_over_operations,
    to_demonstration,
)
from appliance.episode_shapes import edited_files, printed_instead, read_command, unseen_names
from appliance.harness.builtin import SYSTEM_PROMPT
from appliance.schemas import Demonstration, Split, Task, TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.families import synthesize


def char_tokenize(messages, *, untrained=(), tools=None):
    """A char-level stand-in for the chat template: one id per character, the mask on assistant text."""
    ids, mask = [], []
    turn = -1
    for m in messages:
        turn += m["role"] == "assistant"
        head = [ord(c) for c in f"<{m['role']}>"]
        body = [ord(c) for c in m["content"] or ""]
        ids += head + body
        mask += [0] * len(head) + [int(m["role"] == "assistant" and turn not in untrained)] * len(body)
    return [(ids, mask)]


def task_of(spec: TaskSpec, run_id: str = "r1", status: TaskStatus = TaskStatus.VALID,
            split: Split = Split.TRAIN) -> Task:
    return Task(f"{run_id}.{spec.id}", run_id, spec.family, spec.difficulty, spec.source, split, status, spec.to_spec())


def test_reference_solution_becomes_the_harness_conversation(sandbox_settings: Settings) -> None:
    spec = synthesize("text", 3, 1, seed="demo")[0]
    run = demonstrate(sandbox_settings, spec)
    assert run.error is None and run.passed, run
    roles = [m["role"] for m in run.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert run.messages[0]["content"] == SYSTEM_PROMPT
    assert run.messages[1]["content"] == f"Task: {spec.instruction.strip()}"
    assert run.messages[2]["content"] == command_block(spec.solution)
    assert run.messages[3]["content"].startswith("exit code 0")  # the real observation, harness-formatted
    assert run.messages[4]["content"] == FINISH


def test_each_episode_shape_runs_real_turns_and_still_solves_the_task(sandbox_settings: Settings) -> None:
    spec = synthesize("find", 2, 1, seed="shapes")[0]
    plain = demonstrate(sandbox_settings, spec)
    look = demonstrate(sandbox_settings, spec, shape="look")
    check = demonstrate(sandbox_settings, spec, shape="check")
    recover = demonstrate(sandbox_settings, spec, shape="recover")
    for run in (plain, look, check, recover):
        assert run.error is None and run.passed, run
        assert run.messages[-1]["content"] == FINISH
    said = {name: [m["content"] for m in run.messages if m["role"] == "assistant"]
            for name, run in (("plain", plain), ("look", look), ("check", check), ("recover", recover))}
    assert said["plain"] == [command_block(spec.solution), FINISH]
    assert said["look"][0].startswith("```bash\nls -la") and said["look"][1:] == said["plain"]
    assert said["check"][:1] == said["plain"][:1] and len(said["check"]) == 3
    assert check.messages[-2]["content"].startswith("exit code 0")  # the check succeeded, then DONE
    assert recover.untrained == (0,) and said["recover"][1:] == said["plain"]
    assert look.untrained == (0,) and check.untrained == (1,)  # optional looks are context, not lessons
    assert recover.messages[3]["content"].startswith("exit code 127") and "command not found" in recover.messages[3][
        "content"]
    demo = to_demonstration(recover.messages, task_of(spec), char_tokenize, untrained=recover.untrained)
    trained = "".join(chr(i) for i, m in zip(demo.token_ids, demo.mask) if m)
    assert trained == command_block(spec.solution) + FINISH  # the slip is context, never a target


def test_the_fix_shape_prints_instead_of_writing_looks_finds_the_file_missing_and_fixes_it(
        sandbox_settings: Settings) -> None:
    spec = next(s for s in synthesize("pipeline", 2, 4, seed="fix0") if printed_instead(s.solution, s.instruction))
    printed, target = printed_instead(spec.solution, spec.instruction)
    run = demonstrate(sandbox_settings, spec, shape="fix")
    assert run.error is None and run.passed, run
    said = [m["content"] for m in run.messages if m["role"] == "assistant"]
    assert said == [command_block(printed), command_block(f"head -n 20 {target}"), command_block(spec.solution),
                    FINISH]
    assert run.messages[3]["content"].startswith("exit code 0")  # the slip printed its output
    assert "No such file" in run.messages[5]["content"]  # the look finds the file missing, for real
    assert run.untrained == (0,)  # the slip is context; the look that finds it and the fix are lessons
    # a solution whose slip would not only read gets the check shape instead
    other = next(s for s in synthesize("files", 3, 3, seed="fix1") if not printed_instead(s.solution, s.instruction)
                 and not s.meta.get("first_attempt"))
    run = demonstrate(sandbox_settings, other, shape="fix")
    assert run.passed and [m["content"] for m in run.messages if m["role"] == "assistant"][0] == command_block(
        other.solution)


def test_an_episode_whose_solution_uses_an_unnamed_file_looks_first_whatever_its_shape(
        sandbox_settings: Settings) -> None:
    # "the only .log file in this directory" is worker.log: the demonstration must not know it unseen
    spec = next(s for s in synthesize("text", 2, 30, seed="unseen0") if "the only ." in s.instruction)
    hidden = [n for n in unseen_names(spec.instruction, spec.solution) if n in spec.files]
    assert hidden
    for shape in ("solve", "check"):
        run = demonstrate(sandbox_settings, spec, shape=shape)
        assert run.error is None and run.passed, run
        said = [m["content"] for m in run.messages if m["role"] == "assistant"]
        assert said[0].startswith("```bash\nls -la") and said[1] == command_block(spec.solution)
        assert all(name in run.messages[3]["content"] for name in hidden)  # the look's real output shows it
        assert len(said) == (3 if shape == "solve" else 4)
        assert 0 not in run.untrained  # this look is needed: it is trained


def test_a_trapped_task_shows_its_obvious_attempt_failing_then_the_solution(sandbox_settings: Settings) -> None:
    # "Delete every line containing dentist from inventory.txt" where only inventory.txt.gz is there
    spec = next(s for s in synthesize("text", 3, 4, seed="trap0") if s.meta.get("trap") == "gzip")
    run = demonstrate(sandbox_settings, spec)
    assert run.error is None and run.passed, run
    said = [m["content"] for m in run.messages if m["role"] == "assistant"]
    assert said == [command_block(spec.meta["first_attempt"]), command_block(spec.solution), FINISH]
    assert not run.messages[3]["content"].startswith("exit code 0") and "No such file" in run.messages[3]["content"]
    assert run.untrained == (0,)  # the mistake is context; reading the error and fixing it is the lesson


def test_a_repository_in_a_subfolder_shows_git_failing_at_the_top_then_the_cd(sandbox_settings: Settings) -> None:
    # every git chore of the transfer dev set names a checkout in a subfolder; the trained agent ran its
    # (often right) git commands where it stood and read "not a git repository" until the turns ran out
    from appliance.tasks.families._ops import REGISTRY, render

    o = next(o for o in REGISTRY["git"] if o.name == "git-amend-message")
    spec = render(o, 0, 3, random.Random("subdir"), trap="subdir")
    run = demonstrate(sandbox_settings, spec)
    assert run.error is None and run.passed, run
    said = [m["content"] for m in run.messages if m["role"] == "assistant"]
    assert said[-3:] == [command_block(spec.meta["first_attempt"]), command_block(spec.solution), FINISH]
    assert "not a git repository" in run.messages[-4]["content"]


def test_an_in_place_edit_reads_the_file_first_and_that_read_is_trained(sandbox_settings: Settings) -> None:
    spec = next(s for s in synthesize("edit", 3, 8, seed="read0")
                if s.solution.startswith("sed -i") and not s.meta.get("trap")
                and edited_files(s.solution)[0] in s.instruction)  # a file to find is looked for first
    name = edited_files(spec.solution)[0]
    run = demonstrate(sandbox_settings, spec, shape="solve")
    assert run.error is None and run.passed, run
    said = [m["content"] for m in run.messages if m["role"] == "assistant"]
    assert said == [command_block(read_command(name, spec.solution)), command_block(spec.solution), FINISH]
    assert spec.files[name].splitlines()[0] in run.messages[3]["content"]  # the file's own text, really read
    assert run.untrained == ()


def test_a_solution_that_fails_the_verifier_is_no_demonstration(sandbox_settings: Settings, store: Store) -> None:
    good = synthesize("files", 2, 1, seed="demo")[0]
    bad = synthesize("pipeline", 2, 1, seed="demo")[0]
    bad.solution = "echo wrong > nothing.txt\n"
    tasks = [task_of(good), task_of(bad)]
    for t in tasks:
        store.add_task(t)
    result = demonstrate_tasks(sandbox_settings, store, tasks, char_tokenize, iteration=1)
    assert (result.added, result.failed, result.infra) == (1, [tasks[1].id], [])
    demos = store.demonstrations("r1")
    assert [d.task_id for d in demos] == [tasks[0].id] and demos[0].origin == REFERENCE
    assert demos[0].iteration == 1 and any(demos[0].mask)
    # idempotent: a task with a demonstration is not run again
    assert demonstrate_tasks(sandbox_settings, store, tasks, char_tokenize).added == 0


def test_each_demonstration_is_kept_as_soon_as_it_is_made(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance import demonstrations

    specs = synthesize("files", 2, 2, seed="stop")
    tasks = [task_of(s) for s in specs]
    for t in tasks:
        store.add_task(t)

    def run_then_stop(settings, spec, **_):
        if spec.id == specs[1].id:
            raise KeyboardInterrupt  # the run stops here
        return demonstrations.DemoRun([{"role": "assistant", "content": "x"}], True)

    settings = load_settings(environ={"APPLIANCE_HOME": "/nonexistent"})
    monkeypatch.setattr(demonstrations, "demonstrate", run_then_stop)
    with pytest.raises(KeyboardInterrupt):
        demonstrate_tasks(settings, store, tasks, char_tokenize, parallel=1)
    assert [d.task_id for d in store.demonstrations("r1")] == [tasks[0].id]  # the first one was not lost

    def surprise(settings, spec, **_):
        raise ValueError("a bug in one task's verification")

    monkeypatch.setattr(demonstrations, "demonstrate", surprise)  # that task's failure, not the phase's
    assert demonstrate_tasks(settings, store, tasks, char_tokenize).failed == [tasks[1].id]


def test_no_demonstration_starts_once_the_appliance_is_stopping(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The shape of a real failure: SIGTERM during the warm-start pool left the pool running reference
    # solutions while the process tore down, ending in "cannot schedule new futures" tracebacks.
    from appliance import demonstrations

    specs = synthesize("files", 2, 3, seed="sigterm")
    tasks = [task_of(s) for s in specs]
    for t in tasks:
        store.add_task(t)
    stopping = threading.Event()
    started = []

    def run_then_signal(settings, spec, **_):
        started.append(spec.id)
        stopping.set()  # SIGTERM arrives while the first one runs
        return demonstrations.DemoRun([{"role": "assistant", "content": spec.id}], True)

    settings = load_settings(environ={"APPLIANCE_HOME": "/nonexistent"})
    monkeypatch.setattr(demonstrations, "demonstrate", run_then_signal)
    made = demonstrate_tasks(settings, store, tasks, char_tokenize, parallel=1, stopping=stopping)
    assert started == [specs[0].id] and made.added == 1 and not made.failed and not made.infra
    stopping.clear()  # the next start makes only the missing ones
    monkeypatch.setattr(demonstrations, "demonstrate", lambda settings, spec, **_: (
        started.append(spec.id), demonstrations.DemoRun([{"role": "assistant", "content": spec.id}], True))[1])
    assert demonstrate_tasks(settings, store, tasks, char_tokenize, parallel=1, stopping=stopping).added == 2
    assert started == [s.id for s in specs]


def test_setup_failure_is_the_machines_not_the_tasks(sandbox_settings: Settings) -> None:
    spec = synthesize("files", 2, 1, seed="demo")[0]
    spec.setup = "exit 3"
    run = demonstrate(sandbox_settings, spec)
    assert not run.passed and run.error and "set-up" in run.error


def test_store_keeps_one_row_per_conversation_and_refuses_heldout(store: Store) -> None:
    spec = synthesize("files", 2, 1, seed="x")[0]
    task = task_of(spec)
    store.add_task(task)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Task: t"},
                {"role": "assistant", "content": "```bash\nls\n```"}]
    demo = to_demonstration(messages, task, char_tokenize)
    assert store.add_demonstration(demo) is True
    assert store.add_demonstration(demo) is False
    (back,) = store.demonstrations("r1", levels=[2])
    assert back.messages == messages and back.token_ids == demo.token_ids and back.mask == demo.mask
    (sample,) = back.to_samples()
    assert sample.rollout_id == f"demo:{back.id}" and sample.mask == demo.mask
    # a template that is not prefix-stable: one sequence per turn, kept apart through the store
    two = Demonstration.of_sequences([([1, 2, 3], [0, 0, 1]), ([1, 4], [0, 1])], run_id="r1", task_id=task.id,
                                     family=task.family, difficulty=task.difficulty, origin=REFERENCE,
                                     messages=messages[:2], digest="two")
    assert store.add_demonstration(two)
    back = next(d for d in store.demonstrations("r1") if d.digest == "two")
    assert [(s.token_ids, s.mask, s.branch) for s in back.to_samples()] == [([1, 2, 3], [0, 0, 1], 0),
                                                                            ([1, 4], [0, 1], 1)]
    assert store.demonstrations("r1", levels=[3]) == []
    held = task_of(synthesize("files", 2, 1, seed="y")[0], split=Split.HELDOUT)
    store.add_task(held)
    with pytest.raises(Exception, match="held-out"):
        store.add_demonstration(to_demonstration(messages + [{"role": "user", "content": "x"}], held, char_tokenize))


def test_pick_leans_toward_the_frontier() -> None:
    def demo(level: int, i: int) -> Demonstration:
        return Demonstration("r", f"t{level}{i}", "text", level, REFERENCE, [], [1], [1], f"{level}-{i}")

    demos = [demo(level, i) for level in (1, 2, 3, 4) for i in range(50)]
    picked = pick_demonstrations(demos, {"text": 2}, 40, seed=1)
    assert len(picked) == 40 and len({d.digest for d in picked}) == 40
    by_level = {lvl: sum(d.difficulty == lvl for d in picked) for lvl in (1, 2, 3, 4)}
    assert by_level[2] > by_level[3] > by_level[4] and by_level[2] > by_level[1]
    assert pick_demonstrations(demos[:3], {}, 10) == demos[:3]


def test_the_warm_start_pool_spreads_over_operations_and_phrasings() -> None:
    drawn = synthesize("text", 3, 40, seed="spread")
    ops = {s.meta["operation"] for s in drawn}
    picked = spread_over_operations(drawn, 8)
    assert len(picked) == 8 and len({s.meta["operation"] for s in picked}) == min(8, len(ops))
    assert len({s.meta["operation"] for s in drawn[:8]}) < 8  # a plain draw repeats operations
    few = [s for s in drawn if s.meta["operation"] == drawn[0].meta["operation"]]
    again = spread_over_operations(few, 2)
    if len({s.meta["phrasing"] for s in few}) > 1:  # one operation: two different phrasings first
        assert again[0].meta["phrasing"] != again[1].meta["phrasing"]
    assert sorted(s.id for s in spread_over_operations(drawn, 100)) == sorted(s.id for s in drawn)  # all, once


def test_the_real_chat_template_masks_exactly_the_assistant_turns() -> None:
    from appliance.demonstrations import chat_tokenizer

    model = load_settings().model_path
    if not (model / "tokenizer.json").exists():
        pytest.skip(f"the bundled model is not converted at {model}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Task: list files"},
                {"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": "exit code 0\na"},
                {"role": "assistant", "content": "DONE"}]
    ((ids, mask),) = chat_tokenizer(Path(model))(messages)  # ChatML is prefix-stable: one sequence
    trained = tok.decode([i for i, m in zip(ids, mask) if m])
    assert trained == "```bash\nls\n```<|im_end|>DONE<|im_end|>"
    # the template's text less the newline it writes after the last turn (glue, not the model's)
    assert tok.decode(ids) == tok.apply_chat_template(messages, tokenize=False).removesuffix("\n")
    # a slip before the solution: its turn is kept out of the loss
    slipped = messages[:2] + [{"role": "assistant", "content": "```bash\nlss\n```"},
                              {"role": "user", "content": "exit code 127\nstderr:\nbash: lss: command not found"}]
    slipped += messages[2:]
    demo = to_demonstration(slipped, task_of(synthesize("files", 2, 1, seed="t")[0]), chat_tokenizer(Path(model)),
                            untrained=(0,))
    assert tok.decode([i for i, m in zip(demo.token_ids, demo.mask) if m]) == trained


def test_first_learn_phase_warm_starts_later_ones_mix(settings: Settings, store: Store) -> None:
    from appliance.demonstrations import training_mix
    from appliance.schemas import Checkpoint

    store.create_run("r1", {})
    for level in (1, 2, 3, 4, 5):
        for spec in synthesize("files", level, 3, seed="mix"):
            task = task_of(spec)
            store.add_task(task)
            messages = [{"role": "user", "content": f"Task: {spec.instruction}"},
                        {"role": "assistant", "content": command_block(spec.solution)}]
            store.add_demonstration(to_demonstration(messages, task, char_tokenize))
    settings.training.demo_warmstart_epochs = 3.0
    warm = training_mix(settings, store, "r1", 1, {"files": 1}, rl_samples=10)
    wanted = {f"demo:{d.id}" for d in store.demonstrations("r1") if d.difficulty in (2, 3, 4)}
    assert len(wanted) >= 6 and len(store.demonstrations("r1")) > len(wanted)
    assert warm.warmstart and {s.rollout_id for s in warm.samples} == wanted  # levels 2-4 only, each once
    assert len(warm.samples) == len(wanted)
    assert warm.settings.training.sft_epochs == 3.0 and settings.training.sft_epochs != 3.0
    assert all(s.rollout_id.startswith("demo:") and any(s.mask) for s in warm.samples)
    store.add_checkpoint(Checkpoint("r1", 1, 1, "lora", "/nowhere"))
    later = training_mix(settings, store, "r1", 2, {"files": 2}, rl_samples=5)
    assert not later.warmstart and len(later.samples) == max(settings.training.demo_mix_min, 5)
    assert later.settings is settings
    spec = synthesize("text", 2, 1, seed="won")[0]
    won = task_of(spec)
    store.add_task(won)
    mine = to_demonstration([{"role": "assistant", "content": "```bash\nls\n```"}], won, char_tokenize,
                            origin="success", iteration=2)
    store.add_demonstration(mine)
    settings.training.demo_mix_min = 1000  # everything the pool offers
    ids = {s.rollout_id for s in training_mix(settings, store, "r1", 2, {"files": 2}, rl_samples=0).samples}
    mine_id = f"demo:{store.demonstrations('r1', origin='success')[0].id}"
    assert mine_id not in ids  # trained from its exact tokens in its own iteration
    assert mine_id in {s.rollout_id for s in training_mix(settings, store, "r1", 3, {}, rl_samples=0).samples}
    settings.training.demo_mix_min = 8
    settings.training.demo_mix_ratio = 0.0
    assert training_mix(settings, store, "r1", 3, {"files": 2}, rl_samples=5).samples == []
    settings.training.demonstrations = False
    assert training_mix(settings, store, "r1", 1, {}, rl_samples=5).samples == []


@pytest.mark.slow
def test_learn_trains_demonstrations_by_sft_only(store: Store, settings: Settings, tiny_model: Path) -> None:
    """With training.method = grpo and no rollouts, the demonstrations alone are an SFT step: they never
    become GRPO groups, and the checkpoint is written and synced as for any LEARN phase."""
    from appliance.demonstrations import chat_tokenizer
    from appliance.testing import FakeEngine
    from appliance.training.learn import learn

    settings.engine.model = tiny_model
    settings.training.method = "grpo"
    spec = synthesize("files", 2, 1, seed="learn")[0]
    task = task_of(spec)
    store.add_task(task)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"Task: {spec.instruction}"},
                {"role": "assistant", "content": command_block(spec.solution)},
                {"role": "user", "content": "exit code 0\n(no output)"}, {"role": "assistant", "content": FINISH}]
    store.add_demonstration(to_demonstration(messages, task, chat_tokenizer(tiny_model)))
    samples = [s for d in store.demonstrations("r1") for s in d.to_samples()]
    engine = FakeEngine()
    result = learn(store, settings, engine, [], [], run_id="r1", iteration=1, demonstrations=samples)
    assert engine.calls == ["pause", "sync"] and result.policy_version == 1
    (step,) = result.steps
    assert step["sft_steps"] >= 1 and step["sft_tokens"] == sum(samples[0].mask[1:])
    assert "loss" not in step  # no GRPO step: demonstrations are never RL samples
