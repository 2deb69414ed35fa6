"""Fixtures for the trainer tests: a tiny random llama with the bundled model's tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

BUNDLED = Path("~/.local/share/appliance/models/SmolLM2-135M-Instruct").expanduser()


def _make_tiny_model(dest: Path, tokenizer_source: Path) -> Path:
    # Local stand-in for appliance.testing.make_tiny_model (hidden 64, 2 layers, head_dim 32: the shape the
    # CPU vLLM serves), used until that helper lands.
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_source)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    return dest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (BUNDLED / "tokenizer.json").exists():
        pytest.skip(f"the bundled model's tokenizer is missing at {BUNDLED}; run scripts/setup")
    try:
        from appliance.testing import make_tiny_model  # type: ignore[attr-defined]
    except ImportError:
        make_tiny_model = _make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", BUNDLED)
