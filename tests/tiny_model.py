"""A tiny random model for the CPU vLLM (and a LoRA adapter for it, and a checkpoint broken as a crash
mid-write leaves it): the cheap real model the serving, training and proxy tests and benchmarks share."""

from __future__ import annotations

import json
import shutil
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
