"""The served model's chat template: each family's real template (from TRL) tokenizes demonstrations exactly as the
engine would see each turn, prefix-stable or not; doctor's and start-up's description of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.errors import ApplianceError
from appliance.serving.template import ChatTemplate, describe
from tiny_model import FAMILIES, make_family_tokenizer  # tests/tiny_model.py

CONVERSATION = [{"role": "system", "content": "You run shell commands."}, {"role": "user", "content": "Task: list"},
                {"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": "exit code 0\na b"},
                {"role": "assistant", "content": "```bash\nwc -l a\n```"},
                {"role": "user", "content": "exit code 0\n3 a"},
                {"role": "assistant", "content": "DONE"}]
# what each family's model must write for an assistant turn saying X (its end-of-turn token included)
ANSWER = {"qwen2_5": "{}<|im_end|>", "qwen3": "<think>\n\n</think>\n\n{}<|im_end|>", "llama3_1": "{}<|eot_id|>",
          "gemma3": "{}<end_of_turn>", "phi3_5": "{}<|end|>"}


@pytest.fixture(scope="module")
def family_tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    bundled = load_settings().model_path
    if not (bundled / "tokenizer.json").exists():
        pytest.skip(f"the bundled model is not converted at {bundled}: run scripts/setup")
    root = tmp_path_factory.mktemp("families")
    out = {}
    for name, family in FAMILIES.items():
        make_family_tokenizer(root / name, family, bundled)
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_turn_is_trained_after_the_prompt_the_engine_would_send(family_tokenizers: dict[str, Path],
                                                                     name: str) -> None:
    """Before: "the chat template marks no assistant tokens" for every one of these (no generation markers)."""
    template = ChatTemplate(family_tokenizers[name])
    sequences = template(CONVERSATION)
    decode = template.tok.decode
    turns = [i for i, m in enumerate(CONVERSATION) if m["role"] == "assistant"]
    for i in turns:  # every turn: the engine's prompt at that turn, then exactly the model's answer, trained
        prompt = template.encode(template.render(CONVERSATION[:i], prompt=True, tools=None))
        wanted = ANSWER[name].format(CONVERSATION[i]["content"])
        hits = [(ids, mask) for ids, mask in sequences if ids[: len(prompt)] == prompt and mask[len(prompt)]]
        assert hits, (name, i)
        ids, mask = hits[0]
        end = next((j for j in range(len(prompt), len(mask)) if not mask[j]), len(mask))
        assert decode(ids[len(prompt): end]) == wanted
    trained = "".join(decode([t for t, m in zip(ids, mask) if m]) for ids, mask in sequences)
    assert trained == "".join(ANSWER[name].format(CONVERSATION[i]["content"]) for i in turns)


def test_qwen3_is_one_sequence_per_turn_with_earlier_thinking_dropped(family_tokenizers: dict[str, Path]) -> None:
    template = ChatTemplate(family_tokenizers["qwen3"])
    sequences = template(CONVERSATION)
    assert len(sequences) == 3
    last = template.tok.decode(sequences[-1][0])
    assert last.count("<think>") == 1 and last.endswith("<think>\n\n</think>\n\nDONE<|im_end|>")
    assert len(ChatTemplate(family_tokenizers["qwen2_5"])(CONVERSATION)) == 1  # prefix-stable: one sequence


def test_untrained_turns_are_context_and_a_sequence_left_with_nothing_to_train_is_dropped(
        family_tokenizers: dict[str, Path]) -> None:
    for name, count in (("qwen2_5", 1), ("qwen3", 2)):
        template = ChatTemplate(family_tokenizers[name])
        sequences = template(CONVERSATION, untrained={0})
        trained = "".join(template.tok.decode([t for t, m in zip(ids, mask) if m]) for ids, mask in sequences)
        assert "ls\n" not in trained and trained.endswith(ANSWER[name].format("DONE")) and len(sequences) == count
    with pytest.raises(ApplianceError, match="no assistant turn to train"):
        ChatTemplate(family_tokenizers["qwen2_5"])(CONVERSATION[:3], untrained={0})


def test_describe_says_what_the_template_is(family_tokenizers: dict[str, Path], tmp_path: Path) -> None:
    qwen = describe(family_tokenizers["qwen2_5"])
    assert qwen.family.startswith("ChatML") and qwen.prefix_stable and qwen.problem is None
    assert "<|im_end|>" in qwen.end_of_turn and "prefix-stable" in qwen.summary()
    assert describe(family_tokenizers["qwen3"]).prefix_stable is False
    assert "<|eot_id|>" in describe(family_tokenizers["llama3_1"]).end_of_turn
    # a template that refuses the system turn the built-in harness sends (older Gemma, Mistral templates)
    import shutil

    picky = tmp_path / "picky"
    shutil.copytree(family_tokenizers["qwen2_5"], picky)
    (picky / "chat_template.jinja").write_text(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    facts = describe(picky)
    assert facts.problem and "System role not supported" in facts.problem and "cannot render" in facts.summary()
    (picky / "chat_template.jinja").unlink()
    facts = describe(picky)
    assert facts.problem and "no chat template" in facts.problem


def test_doctor_reports_the_template_and_fails_one_that_cannot_render(family_tokenizers: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    import shutil

    from appliance.doctor import check_chat_template

    model = tmp_path / "model"
    shutil.copytree(family_tokenizers["qwen3"], model)
    (model / "config.json").write_text("{}")
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path / "home"), "APPLIANCE_ENGINE__MODEL": str(model)})
    check = check_chat_template(settings)
    assert check.ok and "ChatML" in check.detail and "not prefix-stable" in check.detail
    (model / "chat_template.jinja").write_text("{{ raise_exception('System role not supported') }}")
    check = check_chat_template(settings)
    assert not check.ok and "System role not supported" in check.detail and "own chat template" in check.hint
