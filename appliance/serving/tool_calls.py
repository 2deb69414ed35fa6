"""Which of vLLM's tool-call parsers reads the served model's tool calls (`--tool-call-parser`).

A parser reads one written form of a call, and the chat template decides which form the model was shown
(and, for an upstream model, was trained on). So the template speaks first, then the model's family:

  - `<tool_call>[{...}, ...]</tool_call>`, a list in one tag: the bundled template's form, `xlam`;
  - `<tool_call>{...}</tool_call>`, one JSON object per tag: Qwen2.5, Qwen3 and Hermes write it, `hermes`;
  - `[TOOL_CALLS]`: Mistral's, `mistral`;
  - Llama 3.1+ (`<|python_tag|>` in its vocabulary): a bare JSON object, `llama3_json` (vLLM's parser
    refuses to load without that token, so a Llama-architecture model without it, SmolLM2 with its
    own template, gets none).

`engine.tool_call_parser` overrides the choice. Where nothing fits, the engine serves without a parser
(requests with `tool_choice: auto` are refused by vLLM, answers come back as text) unless
`harness.native_tools` needs one: then the start is refused with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.errors import EngineError

# (what the template writes, parser): the first match wins, so the list form comes before the object form
TEMPLATE_FORMS = (
    ("<tool_call>[", "xlam"),
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
)
# config.json model_type -> parser, for a template that does not show its form
FAMILIES = {"qwen2": "hermes", "qwen2_moe": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
            "mistral": "mistral", "mixtral": "mistral", "llama": "llama3_json"}
LLAMA3_TOKEN = "<|python_tag|>"


def chat_template_text(folder: Path) -> str:
    """The chat template a tokenizer folder carries (chat_template.jinja, else tokenizer_config.json's), or ""."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    template = _json(folder / "tokenizer_config.json").get("chat_template") or ""
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        template = "\n".join(t.get("template", "") for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else ""


def tool_parser(settings: Settings, weights: Path, tokenizer: Path) -> tuple[str | None, str]:
    """(the parser to pass vLLM or None, why); raises EngineError when native tools need one and none fits."""
    chosen = settings.engine.tool_call_parser
    if chosen == "none":
        parser, why = None, "engine.tool_call_parser is none"
    elif chosen != "auto":
        parser, why = chosen, "engine.tool_call_parser names it"
    else:
        parser, why = detect(weights, tokenizer)
    if parser is None and settings.harness.native_tools:
        raise EngineError(
            f"harness.native_tools is on, but no tool-call parser fits the served model ({why})",
            "set engine.tool_call_parser to the vLLM parser that reads this model's calls (`vllm serve --help` "
            "lists them under --tool-call-parser), or turn harness.native_tools off: fenced ```bash blocks "
            "work with every model")
    return parser, why


def detect(weights: Path, tokenizer: Path) -> tuple[str | None, str]:
    template = chat_template_text(tokenizer)
    for mark, parser in TEMPLATE_FORMS:
        if mark in template and (parser != "llama3_json" or _has_token(tokenizer, LLAMA3_TOKEN)):
            return parser, f"the chat template writes {mark}"
    config = _json(weights / "config.json") or _json(tokenizer / "config.json")
    family = str(config.get("model_type") or "")
    by_family = FAMILIES.get(family)
    if by_family == "llama3_json" and not _has_token(tokenizer, LLAMA3_TOKEN):
        return None, f"a {family} model without Llama 3's {LLAMA3_TOKEN} token and a template that shows no " \
                     "tool-call form"
    if by_family is not None:
        return by_family, f"the model is {family} ({', '.join(config.get('architectures') or []) or 'config.json'})"
    if not template:
        return None, f"no chat template in {tokenizer} and model_type {family or 'unknown'}"
    return None, f"the chat template shows no tool-call form known here and model_type {family or 'unknown'} " \
                 "names no parser"


def _has_token(folder: Path, token: str) -> bool:
    # added and special tokens are listed by their text in either file
    return any(token in _text(folder / name) for name in ("tokenizer_config.json", "tokenizer.json"))


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
