"""What the engine serves, as the store records it (`engine.weights`): a full-weights folder, optionally with
a LoRA adapter on top; the weights of a stored policy version, to serve it again; and the one property of a
model folder that decides how new full weights are loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from appliance.errors import EngineError
from appliance.store import Store

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


def stored_weights(store: Store, model_path: Path, version: int, served_name: str) -> Weights:
    """The weights of a stored policy version of the current lineage, to serve it again (`appliance eval
    --version N`): version 0 is the base (the configured model folder), a full version its checkpoint folder,
    an adapter version its adapter on the full weights its parent served. EngineError when the lineage has
    no such version or its files are gone."""
    lineage = store.current_lineage()
    versions = {v["version"]: v for v in store.policy_versions(lineage["id"])} if lineage else {}
    known = ", ".join(str(v) for v in sorted({0, *versions}))

    def weights_of(v: int) -> Weights:
        row = versions.get(v)
        if v == 0 or (row is not None and row["kind"] == "base"):
            return Weights(model_path)
        if row is None:
            raise EngineError(f"policy version {version} is not stored in this data directory's current lineage"
                              f" (its versions: {known})", "`appliance model` lists the versions and their checkpoints")
        if row["kind"] == "lora":
            parent = weights_of(row["parent_version"] if row["parent_version"] is not None else 0)
            return Weights(parent.full, Path(row["weights"]), f"{served_name}-v{v}")
        return Weights(Path(row["weights"]))

    found = weights_of(version)
    if not found.exists():
        raise EngineError(f"the weights of policy version {version} are gone ({found.lora or found.full})",
                          "a version can be served again only while its checkpoint folder exists")
    return found


def is_under(path: Path, folder: Path) -> bool:
    return path.expanduser().resolve().is_relative_to(folder.expanduser().resolve())
