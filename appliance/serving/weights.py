"""What the engine serves, as the store records it (`engine.weights`): a full-weights folder, optionally with
a LoRA adapter on top; and the one property of a model folder that decides how new full weights are loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

WeightsKind = Literal["lora", "full"]


@dataclass(frozen=True)
class Weights:
    """What the engine serves: a full-weights folder, optionally with a LoRA adapter on top."""

    full: Path
    lora: Path | None = None
    adapter_name: str | None = None

    def to_json(self) -> str:
        return json.dumps({"full": str(self.full), "lora": str(self.lora) if self.lora else None,
                           "adapter_name": self.adapter_name})

    @classmethod
    def from_json(cls, text: str | None) -> Weights | None:
        if not text:
            return None
        d = json.loads(text)
        return cls(Path(d["full"]), Path(d["lora"]) if d.get("lora") else None, d.get("adapter_name"))

    def exists(self) -> bool:
        return self.full.exists() and (self.lora is None or self.lora.exists())


def ties_embeddings(folder: Path) -> bool:
    """Whether the model ties its input and output embeddings (config.json `tie_word_embeddings`)."""
    try:
        return bool(json.loads((folder / "config.json").read_text()).get("tie_word_embeddings", False))
    except (OSError, ValueError):
        return False
