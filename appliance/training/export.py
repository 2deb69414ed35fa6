"""`appliance export`: hand a policy version out as a self-contained Hugging Face folder.

Merged (the default): the version's LoRA adapter merged into the base weights (computed in float32, saved
in the base's own dtype), with the base's tokenizer and chat template: loadable with plain
`transformers`, servable by `vllm serve DEST`. A full-weights version is copied as trained (without the
optimizer state); version 0 is the base itself. `--adapter`: the peft adapter folder alone, its
`base_model_name_or_path` pointing at the recorded base, plus the tokenizer.

Every export carries a model card (README.md: base, lineage, how each version was made, the held-out
results of this version with their intervals; see `appliance.lineage.model_card`) and the same facts as
JSON (`appliance-lineage.json`).

Nothing half-written: the folder is written beside DEST (`.DEST.partial`) and renamed onto it at the end;
a missing version, a DEST that is not empty, or too little free disk space fail before anything is
written, and any error on the way removes the partial folder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance import lineage
from appliance.errors import ExportError, NotFoundError  # ExportError importable from here as before
from appliance.store import Store

TOKENIZER_GLOBS = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
                   "chat_template*")
SKIP = {"trainer"}  # a checkpoint's optimizer state: the trainer's, not the model's
MARGIN_BYTES = 64 << 20


@dataclass
class ExportResult:
    dest: Path
    version: int
    kind: str  # "merged", "adapter", "full" or "base"
    bytes: int


def export_version(store: Store, dest: Path | str, *, version: int | None = None, adapter: bool = False,
                   disk_free: Callable[[Path], int] | None = None) -> ExportResult:
    """Write policy `version` (default: the one the engine serves) of the current lineage to `dest`."""
    current = store.current_lineage()
    if current is None:
        raise NotFoundError("this data directory has no recorded base model, so nothing to export",
                            "start the appliance once (`appliance run`), then export")
    if version is None:
        version = store.engine_state()[1]
    row = lineage.version_row(store, version)  # NotFoundError naming the versions that exist
    weights, kind = Path(row["weights"]), row["kind"]
    base = Path(current["base_path"])
    if adapter and kind != "lora":
        raise ExportError(f"policy version {version} is {'the base model' if kind == 'base' else 'full weights'}:"
                          " it has no adapter", "export it without --adapter (a complete model folder)")
    for folder in {weights, base}:
        if not folder.is_dir():
            raise ExportError(f"the weights of version {version} are missing: no folder {folder}",
                              "the checkpoint folder was moved or deleted; restore it from a backup")
    dest = Path(dest).expanduser().resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ExportError(f"{dest} exists and is not empty", "give a new folder (export never overwrites one)")
    out_kind = "adapter" if adapter else ("merged" if kind == "lora" else kind)
    needed = _size(weights) if kind != "lora" or adapter else _size(base)
    needed += MARGIN_BYTES
    where = _existing_parent(dest)
    free = (disk_free or (lambda p: shutil.disk_usage(p).free))(where)
    if free < needed:
        raise ExportError(f"not enough disk space at {where}: {free / 2**20:.0f} MiB free, the export needs about "
                          f"{needed / 2**20:.0f} MiB", "free some space or export to another disk")

    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # what an interrupted export left
    partial.mkdir(parents=True)
    try:
        if out_kind == "merged":
            _write_merged(base, weights, partial)
            _copy_tokenizer(base, partial)
        elif out_kind == "adapter":
            _copy_tree(weights, partial)
            _point_adapter_at(partial, base)
            _copy_tokenizer(base, partial)
        else:  # the base, or full weights as trained (their folder has config and tokenizer)
            _copy_tree(weights, partial)
        (partial / "README.md").write_text(lineage.model_card(store, version, merged=not adapter))
        (partial / "appliance-lineage.json").write_text(json.dumps(_facts(store, version, out_kind), indent=2))
        if dest.exists():
            dest.rmdir()  # the empty folder the user made for it
        partial.rename(dest)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise ExportError(f"export of version {version} to {dest} failed: {e}",
                          "nothing was left at the destination; fix the cause (disk space, permissions) "
                          "and retry") from e
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return ExportResult(dest, version, out_kind, _size(dest))


def _write_merged(base: Path, adapter: Path, out: Path) -> None:
    import torch  # heavy: only when exporting
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = json.loads((base / "config.json").read_text())
    # the config names its dtype ("bfloat16"): the torch attribute of that name
    dtype = getattr(torch, str(config.get("torch_dtype") or config.get("dtype") or "float32"))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.to(dtype).save_pretrained(str(out), safe_serialization=True)


def _copy_tree(src: Path, out: Path) -> None:
    for item in src.iterdir():
        if item.name in SKIP or item.name.startswith("."):
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, out / item.name)


def _copy_tokenizer(base: Path, out: Path) -> None:
    for pattern in TOKENIZER_GLOBS:
        for item in base.glob(pattern):
            if item.is_file() and not (out / item.name).exists():
                shutil.copy2(item, out / item.name)


def _point_adapter_at(folder: Path, base: Path) -> None:
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = str(base)
    config_path.write_text(json.dumps(config, indent=2))


def _facts(store: Store, version: int, kind: str) -> dict:
    current = store.current_lineage()
    if current is None:
        raise ExportError("this store records no base model, so there is nothing to export",
                          "start the engine once (`appliance serve` or `appliance run`) so it records its model")
    return {"export": kind, "policy_version": version,
            "base": {k: current[k] for k in ("base_name", "base_path", "model_type", "parameters", "content_hash")},
            "lineage": current["id"],
            "chain": [{k: r.get(k) for k in ("version", "parent_version", "kind", "run_id", "iteration", "made_by")}
                      for r in lineage.chain(store, version)],
            "heldout": lineage.heldout_results(store, version, current["id"])}


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and SKIP.isdisjoint(p.relative_to(path).parts))


def _existing_parent(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path
