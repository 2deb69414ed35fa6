"""The engine's tool-call parser follows the served model (issue 46, item 2): the xlam parser reads only the
bundled template's `<tool_call>[...]` list; Qwen writes one object per tag, Llama 3.1 bare JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.errors import ApplianceError
from appliance.serving.bundled_model import chat_template
from appliance.serving.process import command, launch
from appliance.serving.tool_calls import detect

QWEN_TEMPLATE = ('{%- if tools %}<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n'
                 '</tool_call>{%- endif %}<|im_start|>{{ message.role }}')
LLAMA3_TEMPLATE = "<|start_header_id|>ipython<|end_header_id|>{{ '<|python_tag|>' }}"


def model(path: Path, model_type: str, *, template: str | None = None, tokens: list[str] = ()) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": ["X"]}))
    config: dict = {"added_tokens_decoder": {str(i): {"content": t} for i, t in enumerate(tokens)}}
    if template is not None:
        config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def parser_of(settings: Settings, folder: Path) -> str | None:
    cmd = command(settings, folder, folder)
    if "--tool-call-parser" not in cmd:
        assert "--enable-auto-tool-choice" not in cmd
        return None
    assert "--enable-auto-tool-choice" in cmd
    return cmd[cmd.index("--tool-call-parser") + 1]


def test_the_parser_follows_the_model_family(settings: Settings, tmp_path: Path) -> None:
    assert parser_of(settings, model(tmp_path / "qwen", "qwen2")) == "hermes"  # no template: the family
    assert parser_of(settings, model(tmp_path / "qwen3", "qwen3", template=QWEN_TEMPLATE)) == "hermes"
    assert parser_of(settings, model(tmp_path / "llama3", "llama", tokens=["<|python_tag|>"])) == "llama3_json"
    assert parser_of(settings, model(tmp_path / "mistral", "mistral")) == "mistral"


def test_the_bundled_template_keeps_xlam_whatever_the_family(settings: Settings, tmp_path: Path) -> None:
    # SmolLM2 is a llama: its template, not its family, says how calls are written
    assert parser_of(settings, model(tmp_path / "smol", "llama", template=chat_template())) == "xlam"
    # and the bundled model with Qwen2.5's template writes Qwen's form
    assert parser_of(settings, model(tmp_path / "smol-qwen", "llama", template=QWEN_TEMPLATE)) == "hermes"


def test_a_template_file_beside_the_tokenizer_is_read(tmp_path: Path) -> None:
    folder = model(tmp_path / "m", "gemma3")
    (folder / "chat_template.jinja").write_text(chat_template())
    assert detect(folder, folder)[0] == "xlam"


def test_a_llama_without_llama3s_token_gets_no_json_parser(settings: Settings, tmp_path: Path) -> None:
    # vLLM's llama3_json parser refuses to load without <|python_tag|> in the vocabulary
    folder = model(tmp_path / "smol-own", "llama", template="<|im_start|>{{ message.content }}")
    parser, why = detect(folder, folder)
    assert parser is None and "<|python_tag|>" in why
    assert parser_of(settings, folder) is None  # served without a parser while nothing needs one


def test_no_parser_for_native_tools_is_refused_with_the_fix(settings: Settings, tmp_path: Path) -> None:
    settings.harness.native_tools = True
    folder = model(tmp_path / "gemma", "gemma3", template="<start_of_turn>{{ message.content }}")
    with pytest.raises(ApplianceError, match="no tool-call parser fits") as e:
        command(settings, folder, folder)
    assert "engine.tool_call_parser" in e.value.hint and "harness.native_tools" in e.value.hint
    settings.engine.tool_call_parser = "pythonic"  # the person names one: it is passed as it is
    assert parser_of(settings, folder) == "pythonic"
    settings.engine.tool_call_parser = "none"
    with pytest.raises(ApplianceError, match="engine.tool_call_parser is none"):
        command(settings, folder, folder)


def test_the_refusal_comes_before_the_engine_starts(settings: Settings, tmp_path: Path) -> None:
    settings.harness.native_tools = True
    folder = model(tmp_path / "gemma", "gemma3", template="<start_of_turn>{{ message.content }}")
    with pytest.raises(ApplianceError, match="no tool-call parser fits"):
        launch(settings, folder, folder)
    assert not (settings.home / "logs" / "engine.log").exists()  # no process was started, no log begun
