"""Hindsight relabelling: a hinted success becomes a demonstration of the bare request; other successes are kept."""

from __future__ import annotations

import inspect

from appliance.demonstrations import HINDSIGHT
from appliance.harness.builtin import SYSTEM_PROMPT
from appliance.hindsight import relabel_hindsight, unhinted_instruction
from appliance.schemas import ModelCall, Outcome, Rollout, RolloutStatus
from appliance.store import Store
from appliance.tasks.families import synthesize
from test_demonstrations import char_tokenize, task_of  # tests/test_demonstrations.py


def test_hindsight_relabels_a_hinted_success_as_the_plain_request(store: Store) -> None:
    spec = synthesize("text", 2, 1, seed="h")[0]
    spec.meta.update(hint="tool", unhinted_instruction="Do the plain thing.")
    plain_spec = synthesize("text", 2, 1, seed="p")[0]  # no hint: never relabelled
    tasks = [task_of(spec), task_of(plain_spec)]
    store.create_run("r1", {})
    for i, t in enumerate(tasks):
        store.add_task(t)
        rid = f"ro{i}"
        store.add_rollout(Rollout(rid, "r1", t.id, f"g{i}", 1, "builtin", 0, RolloutStatus.PENDING, "train"))
        store.start_rollout(rid)
        request = {"messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                {"role": "user", "content": f"Task: {t.spec['instruction']}"}]}
        response = {"choices": [{"message": {"role": "assistant", "content": "```bash\nls\n```"}}]}
        store.add_model_call(ModelCall(None, rid, 0, "ok", request, response, [1, 2], [3], [0.0], 0, 0.1))
        store.finish_rollout(rid, Outcome.SUCCESS, 1.0)
    assert relabel_hindsight(store, "r1", 1, char_tokenize).added == 1
    (demo,) = store.demonstrations("r1", origin=HINDSIGHT)
    assert demo.task_id == tasks[0].id
    assert demo.messages[1]["content"] == "Task: Do the plain thing."
    assert demo.messages[-1]["content"] == "```bash\nls\n```"
    assert relabel_hindsight(store, "r1", 1, char_tokenize).added == 0  # deduplicated
    # kept successes: the unhinted task's win joins the pool as it was (the hinted one is already there)
    assert relabel_hindsight(store, "r1", 1, char_tokenize, keep_successes=True).added == 1
    (kept,) = store.demonstrations("r1", origin="success")
    assert kept.task_id == tasks[1].id and kept.messages[1]["content"] == f"Task: {tasks[1].spec['instruction']}"
    assert relabel_hindsight(store, "r1", 1, char_tokenize, keep_successes=True).added == 0


def test_hinted_task_is_redrawn_without_its_hint(store: Store) -> None:
    if "hint" not in inspect.signature(synthesize).parameters:
        spec = synthesize("text", 2, 1, seed="h")[0]
        spec.meta["hint"] = "tool"
        assert unhinted_instruction(task_of(spec)) is None  # families without the ladder: nothing to relabel
        return
    for hint in ("tool", "partial"):
        hinted = synthesize("text", 3, 1, seed="h", hint=hint)[0]
        plain = unhinted_instruction(task_of(hinted))
        assert plain and hinted.instruction.startswith(plain + "\n\nHint: ") and "Hint" not in plain


def test_a_conversation_the_template_cannot_render_is_that_rollouts_loss_not_the_passs(store: Store) -> None:
    """An upstream template (no generation markers) made the old tokenizer raise, and relabelling let it out of
    TRAIN's phase: the run failed. Now the rollout is counted and the others are still relabelled."""
    from appliance.errors import ApplianceError

    store.create_run("r1", {})
    for i in range(2):
        t = task_of(synthesize("text", 2, 1, seed=f"u{i}")[0])
        store.add_task(t)
        rid = f"ro{i}"
        store.add_rollout(Rollout(rid, "r1", t.id, f"g{i}", 1, "builtin", 0, RolloutStatus.PENDING, "train"))
        store.start_rollout(rid)
        request = {"messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                {"role": "user", "content": f"Task: {t.spec['instruction']}"}],
                   "tools": [{"type": "function", "function": {"name": "bash"}}]}
        answer = "```bash\nls\n```" if i else "```bash\nunrenderable\n```"
        response = {"choices": [{"message": {"role": "assistant", "content": answer}}]}
        store.add_model_call(ModelCall(None, rid, 0, "ok", request, response, [1, 2], [3], [0.0], 0, 0.1))
        store.finish_rollout(rid, Outcome.SUCCESS, 1.0)
    seen_tools = []

    def picky(messages, *, untrained=(), tools=None):
        seen_tools.append(tools)
        if "unrenderable" in messages[-1]["content"]:
            raise ApplianceError("the chat template cannot render this conversation", "use another")
        return char_tokenize(messages, untrained=untrained)

    done = relabel_hindsight(store, "r1", 1, picky, keep_successes=True)
    assert done.added == 1 and list(done.unrendered) == ["ro0"]
    assert seen_tools[0] == [{"type": "function", "function": {"name": "bash"}}]  # rendered with the request's tools
