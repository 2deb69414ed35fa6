"""A tiny random model for the CPU vLLM (and a LoRA adapter for it, and a checkpoint broken as a crash
mid-write leaves it): the cheap real model the serving, training and proxy tests and benchmarks share."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

# head_dim 32: the CPU attention kernels support 32/64/80/...; 16 crashes the engine.
TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=32, max_position_embeddings=4096)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def make_tiny_model(dest: Path, tokenizer_source: Path, *, seed: int = 0, tie_word_embeddings: bool = False) -> Path:
    """A seeded random llama (float32) with the bundled model's tokenizer and chat template.

    The weights are drawn with a large init scale so greedy decoding has clear winners: with the
    default 0.02 the logits are nearly flat and float rounding could flip near-ties between vLLM and
    transformers, which would make the canary flaky for reasons that are not bugs. Untied embeddings
    by default, so a full weight sync goes through vLLM's in-place reload (tied models restart the
    engine instead; see appliance.serving.engine).
    """
    import torch  # lazily: only tests and scripts build models
    from transformers import LlamaConfig, LlamaForCausalLM

    src_config = json.loads((tokenizer_source / "config.json").read_text())
    config = LlamaConfig(vocab_size=src_config["vocab_size"], bos_token_id=src_config.get("bos_token_id"),
                         eos_token_id=src_config.get("eos_token_id"), pad_token_id=src_config.get("pad_token_id"),
                         tie_word_embeddings=tie_word_embeddings, initializer_range=0.5, **TINY_CONFIG)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    copy_tokenizer(tokenizer_source, dest)
    return dest


def copy_tokenizer(source: Path, dest: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, dest / name)


def make_tiny_lora(dest: Path, base: Path, *, seed: int = 1, rank: int = 8) -> Path:
    """A LoRA adapter for `base` with random, non-zero B matrices, so it changes the model's outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank,
                                                  target_modules=["q_proj", "v_proj", "o_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.5)
    peft_model.save_pretrained(str(dest))
    return dest


def corrupt_checkpoint(folder: Path) -> Path:
    """Truncate the weights file in place, as a crash mid-write would leave it."""
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return folder


# --- the model matrix: a tiny random model of each family whose chat template TRL ships ------------------
@dataclass(frozen=True)
class Family:
    """A model family as a user brings it: its architecture, its special tokens, its real chat template."""

    name: str
    template: str  # file in trl/chat_templates
    architecture: str  # transformers config class name
    special: tuple[str, ...]  # the family's special tokens, added to the bundled tokenizer
    eos: str  # the tokenizer's eos
    stops: tuple[str, ...] = ()  # further end-of-turn tokens only generation_config.json names
    bos: str | None = None
    config: tuple[tuple[str, object], ...] = ()


FAMILIES = {
    f.name: f for f in (
        Family("qwen2_5", "qwen2_5.jinja", "Qwen2Config",
               ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"), "<|im_end|>",
               ("<|endoftext|>",)),
        Family("qwen3", "qwen3.jinja", "Qwen3Config",
               ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>"),
               "<|im_end|>", ("<|endoftext|>",)),
        Family("llama3_1", "llama3_1.jinja", "LlamaConfig",
               ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                "<|python_tag|>"), "<|eot_id|>", ("<|eom_id|>",), "<|begin_of_text|>",
               (("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}),)),
        Family("gemma3", "gemma3.jinja", "Gemma3TextConfig",
               ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"), "<eos>", ("<end_of_turn>",), "<bos>",
               (("sliding_window", 512), ("query_pre_attn_scalar", 32))),
        Family("phi3_5", "phi3_5.jinja", "Phi3Config",
               ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"), "<|endoftext|>",
               ("<|end|>",)),
    )
}


def make_family_tokenizer(dest: Path, family: Family, tokenizer_source: Path) -> int:
    """The bundled tokenizer with `family`'s special tokens, eos/bos and real chat template (from TRL), and a
    generation_config.json naming its end-of-turn tokens as the family's models do; returns the vocab size."""
    import trl
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_source))
    tok.add_special_tokens({"additional_special_tokens": list(family.special)})
    tok.eos_token = family.eos
    if family.bos:
        tok.bos_token = family.bos
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / family.template).read_text()
    dest.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(dest))
    ids = [tok.convert_tokens_to_ids(t) for t in (family.eos, *family.stops)]
    (dest / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": ids, "bos_token_id": tok.bos_token_id, "pad_token_id": ids[0]}))
    return len(tok)


def make_family_model(dest: Path, family: Family, tokenizer_source: Path, *, seed: int = 0) -> Path:
    """A seeded random model of `family`'s architecture (float32, head_dim 32, untied) with its tokenizer."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    vocab = make_family_tokenizer(dest, family, tokenizer_source)
    generation = json.loads((dest / "generation_config.json").read_text())
    config_class = getattr(transformers, family.architecture)
    config = config_class(vocab_size=-(-vocab // 64) * 64, bos_token_id=generation["bos_token_id"],
                          eos_token_id=generation["eos_token_id"][0], pad_token_id=generation["pad_token_id"],
                          tie_word_embeddings=False, initializer_range=0.5, **TINY_CONFIG, **dict(family.config))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    model.generation_config.eos_token_id = generation["eos_token_id"]
    model.save_pretrained(dest, safe_serialization=True)
    (dest / "generation_config.json").write_text(json.dumps(
        {**generation, "transformers_version": transformers.__version__}))
    return dest
