"""The served model's chat template: conversations tokenized the way the engine sees them, and what the template is.

The engine (vLLM's chat completions) renders a request's messages with the model's own template and
`add_generation_prompt`, tokenizes that text without adding special tokens, and the model's answer follows
as sampled tokens up to an end-of-turn token. A demonstration is tokenized the same way, one assistant
turn at a time, with no `{% generation %}` markers (no upstream template has them):

    prompt_i = render(messages[:i], add_generation_prompt=True)       # what the engine would send
    answer_i = render(messages[:i + 1])[len(prompt_i):]               # what the template writes for turn i
    tokens   = encode(prompt_i) + encode(answer_i) cut after its first end-of-turn token

The cut keeps what the model must sample (its text and the token that stops the engine) and leaves out the
glue a template writes after it (a newline, Phi's `<|endoftext|>`): that belongs to the next prompt.

Turns share one sequence when the template is prefix-stable: the next prompt's tokens start with this
sequence's tokens, so every earlier turn is context exactly as the engine saw it. Templates that are not
(Qwen3 drops the `<think>` block of earlier turns and writes an empty one on the last; Llama 3.2 writes
today's date into the system turn) give one sequence per turn that does not extend the one before, each
with the prompt the engine would really have sent at that turn. A conversation the template cannot render
(a role it refuses, a prompt that the full rendering does not start with) raises `ApplianceError`: the
caller counts that conversation as its failure and goes on.

`describe` is what doctor and the engine's start-up say about the template: where it comes from, its turn
markers, whether it is prefix-stable, and whether it can render the built-in harness's conversations at all.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError

Sequence = tuple[list[int], list[int]]  # token ids and their mask: 1 on what the assistant sampled

# Turn markers that name a template family in what doctor and start-up print (the first found wins).
TURN_MARKERS = (("<|im_start|>", "ChatML (Qwen, SmolLM)"), ("<|start_header_id|>", "Llama 3"),
                ("<start_of_turn>", "Gemma"), ("<|assistant|>", "Phi 3"), ("[INST]", "Mistral"))
PROBE = [{"role": "system", "content": "You run shell commands."}, {"role": "user", "content": "Task: list files"},
         {"role": "assistant", "content": "```bash\nls\n```"}, {"role": "user", "content": "Output: a b"},
         {"role": "assistant", "content": "DONE"}]


def end_of_turn_ids(tok: Any, model_path: Path) -> set[int]:
    """The ids that end an assistant turn: the tokenizer's eos and the generation config's (the engine stops at
    either; Llama 3 and Gemma 3 end turns with a token that only generation_config.json names)."""
    ids: set[int] = set()
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    config = model_path / "generation_config.json"
    if config.is_file():
        try:
            eos = json.loads(config.read_text()).get("eos_token_id")
        except (OSError, ValueError):
            eos = None
        ids.update(int(i) for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int))
    return ids


class ChatTemplate:
    """The tokenizer and template of the model at `model_path` (loaded once: seconds)."""

    def __init__(self, model_path: Path) -> None:
        from transformers import AutoTokenizer  # lazily: seconds to import

        self.model_path = Path(model_path)
        self.tok = AutoTokenizer.from_pretrained(str(model_path))
        if not self.tok.chat_template:
            raise ApplianceError(f"the model at {model_path} has no chat template",
                                 "put the model's chat template in its folder (chat_template.jinja, or "
                                 "chat_template in tokenizer_config.json), as its publisher ships it")
        self.stops = end_of_turn_ids(self.tok, self.model_path)

    def render(self, messages: list[dict[str, Any]], *, prompt: bool, tools: list[dict[str, Any]] | None) -> str:
        offered: list[Any] | None = list(tools) if tools else None
        try:
            text = self.tok.apply_chat_template(messages, tools=offered, add_generation_prompt=prompt, tokenize=False)
        except Exception as e:  # noqa: BLE001 - jinja's TemplateError and whatever a template's raise_exception throws
            raise ApplianceError(f"the chat template cannot render this conversation: {e}",
                                 "the built-in harness sends a system prompt, then alternating user and assistant "
                                 "turns; use a template that accepts them") from e
        return str(text)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def answer(self, messages: list[dict[str, Any]], i: int,
               tools: list[dict[str, Any]] | None) -> tuple[list[int], list[int]]:
        """Assistant turn `messages[i]`: the prompt's ids as the engine would send them, and its answer's ids."""
        prompt = self.render(messages[:i], prompt=True, tools=tools)
        full = self.render(messages[: i + 1], prompt=False, tools=tools)
        if not full.startswith(prompt):
            raise ApplianceError(f"the chat template renders assistant turn {i} so that its prompt is not a prefix "
                                 "of the conversation it starts", "use the model's own chat template")
        answer = self.encode(full[len(prompt):])
        cut = next((j + 1 for j, t in enumerate(answer) if t in self.stops), None)
        if cut is None:  # no end-of-turn token known: the text the template wrote, less trailing glue
            text = full[len(prompt):]
            answer = self.encode(text.rstrip()) if text.strip() else answer
        else:
            answer = answer[:cut]
        return self.encode(prompt), answer

    def __call__(self, messages: list[dict[str, Any]], *, untrained: Collection[int] = (),
                 tools: list[dict[str, Any]] | None = None) -> list[Sequence]:
        """The conversation as training sequences; the assistant turns numbered in `untrained` (0 = the first)
        are context only. Raises ApplianceError when nothing is left to train or the template cannot render it."""
        sequences: list[Sequence] = []
        ids: list[int] = []
        mask: list[int] = []
        turn = -1
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            turn += 1
            prompt, answer = self.answer(messages, i, tools)
            if ids and prompt[: len(ids)] == ids:  # the engine's next prompt extends this sequence: one sequence
                mask += [0] * (len(prompt) - len(ids))
                ids = list(prompt)
            else:
                if any(mask):
                    sequences.append((ids, mask))
                ids, mask = list(prompt), [0] * len(prompt)
            ids += answer
            mask += [0 if turn in untrained else 1] * len(answer)
        if any(mask):
            sequences.append((ids, mask))
        if not sequences:
            raise ApplianceError("the conversation has no assistant turn to train",
                                 "a demonstration needs at least one trained assistant turn")
        return sequences


@dataclass(frozen=True, slots=True)
class TemplateFacts:
    """What `describe` found about a model's chat template."""

    source: str  # where the template came from
    family: str  # the turn markers' family, or "unknown"
    generation_markers: bool
    prefix_stable: bool | None  # None: the probe conversation did not render
    end_of_turn: list[str]
    problem: str | None = None  # why the built-in harness's conversations cannot be rendered, if so

    def summary(self) -> str:
        if self.problem:
            return f"from {self.source}: {self.problem}"
        stable = ("prefix-stable: a conversation is one training sequence" if self.prefix_stable else
                  "not prefix-stable: a demonstration is one training sequence per turn")
        ends = ", ".join(self.end_of_turn) or "no end-of-turn token known (answers end at their text)"
        markers = "has {% generation %} markers" if self.generation_markers else "no generation markers"
        return f"{self.family}, from {self.source}; {stable}; turns end with {ends}; {markers} (not needed)"


def describe(model_path: Path) -> TemplateFacts:
    """Doctor's and start-up's look at the template: renders a two-turn probe of the built-in harness's shape."""
    source = ("chat_template.jinja" if (model_path / "chat_template.jinja").is_file()
              else "tokenizer_config.json" if (model_path / "tokenizer_config.json").is_file() else "none found")
    try:
        template = ChatTemplate(model_path)
    except ApplianceError as e:
        return TemplateFacts(source, "unknown", False, None, [], e.message)
    except Exception as e:  # noqa: BLE001 - no tokenizer, or one transformers cannot read: said, never raised
        return TemplateFacts(source, "unknown", False, None, [], f"the tokenizer does not load: {e}")
    text = str(template.tok.chat_template)
    family = next((name for marker, name in TURN_MARKERS if marker in text), "unknown")
    ends = sorted(str(template.tok.convert_ids_to_tokens(i)) for i in template.stops)
    try:
        sequences = template(PROBE)
    except ApplianceError as e:
        return TemplateFacts(source, family, "{% generation" in text, None, ends, e.message)
    return TemplateFacts(source, family, "{% generation" in text, len(sequences) == 1, ends)
