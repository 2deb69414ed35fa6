"""The model's identity: which base model a data directory belongs to, and where each policy version came from.

A *lineage* is one base model and the policy versions trained from it. The first engine start records
the base (resolved path, model type, parameter count and a content hash of its config and weights files);
every weight sync the engine passes records a version with its parent and weights, and the checkpoint row
beside it says which run and iteration made it. Version 0 is always the base.

The configuration and the store must agree: at every start `check_base` compares the configured model
folder (`engine.model`, or the bundled default) with the recorded base and refuses a different one,
naming both and the two ways out: a new data directory, or `appliance model use PATH` (`use_model`),
which starts a new lineage (policy version 0 on the new base), archives the old lineage's checkpoint
folders and keeps its runs, reports and versions. Runs, checkpoints and curves carry their lineage, so a
version number is only ever read within one lineage.

The identity check is cheap at every start: the content hash (a full read of the weights) is recomputed
only when a file's size or modification time differs from the recorded ones.

What this module does not do: load weights (that is `serving` and `training.export`); it reads files and
the store only, so the status, the TUI and the reports can all say what is served.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError, NotFoundError
from appliance.schemas import EngineState
from appliance.store import Store

WEIGHT_SUFFIXES = (".safetensors", ".bin")
HASH_CHUNK = 1 << 22


class ModelMismatch(ApplianceError):
    """The configured model is not the base this data directory's policy versions were trained from."""


# --- the base model's identity ---------------------------------------------------------------------
def identity_files(folder: Path) -> list[Path]:
    """config.json and the weights files: what the identity hashes (tokenizer files are not weights)."""
    weights = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES
                     and not p.name.startswith("."))
    return [folder / "config.json", *weights]


def file_stats(folder: Path) -> dict[str, list[int]]:
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in identity_files(folder)}


def model_identity(folder: Path | str) -> dict[str, Any]:
    """Resolved path, name, model type, parameter count and content hash of a Hugging Face model folder."""
    folder = Path(folder).expanduser().resolve()
    if not (folder / "config.json").is_file():
        raise ApplianceError(f"no Hugging Face model folder at {folder} (config.json is missing)",
                             "give the folder that holds config.json and the *.safetensors weights")
    config = json.loads((folder / "config.json").read_text())
    digest = hashlib.sha256()
    for path in identity_files(folder):
        file_digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                file_digest.update(chunk)
        digest.update(f"{path.name}\0{file_digest.hexdigest()}\n".encode())
    return {"path": str(folder), "name": folder.name, "model_type": config.get("model_type"),
            "parameters": parameter_count(folder), "content_hash": digest.hexdigest(), "files": file_stats(folder)}


def parameter_count(folder: Path) -> int | None:
    """Parameters in the safetensors files, read from their headers (no weights are loaded)."""
    total, found = 0, False
    for path in folder.glob("*.safetensors"):
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        for name, meta in header.items():
            if name != "__metadata__":
                total += math.prod(meta["shape"])
                found = True
    return total if found else None


def _mismatch(configured: Path, recorded: str, recorded_name: str, settings_home: Path | None) -> ModelMismatch:
    home = f" ({settings_home})" if settings_home else ""
    return ModelMismatch(
        f"the configured model {configured} is not the base model of this data directory{home}: its policy "
        f"versions, runs and reports were made from {recorded_name} at {recorded}",
        f"either point APPLIANCE_HOME at a new data directory for {configured.name}, or run "
        f"`appliance model use {configured}` to start a new lineage on it in this data directory (the old "
        f"lineage's history is kept; policy versions count from 0 again); or set engine.model back to {recorded}",
    )


def check_base(store: Store, model_path: Path, *, checkpoints_dir: Path | None = None,
               home: Path | None = None, record: bool = True) -> dict[str, Any] | None:
    """Called at every engine start: the configured model is the recorded base, or `ModelMismatch`.

    The first start records the base (and gives it what the store holds from before lineages existed);
    `record=False` (the doctor) only checks, writes nothing, and returns None where it would record."""
    configured = Path(model_path).expanduser().resolve()
    current = store.current_lineage()
    if current is None:
        # A store from before lineages were recorded names the folder it served in the engine row.
        weights = store.engine_state()[2]
        served = Path(json.loads(weights)["full"]).resolve() if weights else None
        under_checkpoints = (served is not None and checkpoints_dir is not None
                             and served.is_relative_to(Path(checkpoints_dir).resolve()))
        if served is not None and served != configured and not under_checkpoints:
            raise _mismatch(configured, str(served), served.name, home)
        if not record:
            return None
        lineage_id = store.start_lineage(model_identity(configured), "first start", adopt_unassigned=True)
        return store.get_lineage(lineage_id)
    if str(configured) == current["base_path"] and _stats_match(current["files"], configured):
        return current
    identity = model_identity(configured)
    if identity["content_hash"] != current["content_hash"]:
        raise _mismatch(configured, current["base_path"], current["base_name"], home)
    if not record:
        return current
    store.update_lineage_files(current["id"], identity["path"], identity["files"])  # moved or touched
    return store.get_lineage(current["id"])


def _stats_match(recorded: dict[str, list[int]], folder: Path) -> bool:
    try:
        return file_stats(folder) == recorded
    except OSError:
        return False


def use_model(settings: Settings, store: Store, path: Path | str | None = None) -> dict[str, Any]:
    """`appliance model use [PATH]`: make PATH (default: the configured model) the base of a new lineage.

    PATH must be the configured model (`engine.model`), so that every later start serves it; the engine
    must not be running. The old lineage's checkpoint folders move to `checkpoints-lineage-N` (its rows
    follow), so the new lineage's `v1` never overwrites the old one's."""
    configured = settings.model_path.expanduser().resolve()
    target = Path(path).expanduser().resolve() if path is not None else configured
    if target != configured:
        raise ApplianceError(
            f"{target} is not the configured model ({configured})",
            f"set engine.model = \"{target}\" in the settings file (or APPLIANCE_ENGINE__MODEL={target}) and run "
            "`appliance model use` again: the store and the configuration must name the same model")
    if engine_running(settings, store):
        raise ApplianceError("the engine of this data directory is running",
                             "stop the appliance first (`appliance stop`, Ctrl-C, or stop `appliance serve`)")
    identity = model_identity(target)
    current = store.current_lineage()
    if current is not None and current["content_hash"] == identity["content_hash"]:
        return current  # already the base: nothing to switch
    if current is not None:
        archive = settings.home / f"checkpoints-lineage-{current['id']}"
        if settings.checkpoints_dir.exists() and any(settings.checkpoints_dir.iterdir()) and not archive.exists():
            settings.checkpoints_dir.rename(archive)
            store.move_checkpoint_paths(current["id"], str(settings.checkpoints_dir), str(archive))
    reason = "appliance model use" + (f" (after lineage {current['id']}: {current['base_name']})" if current else "")
    return store.get_lineage(store.start_lineage(identity, reason, adopt_unassigned=current is None))


def engine_running(settings: Settings, store: Store) -> bool:
    """The store says the engine is up and its recorded process is alive (a killed appliance leaves a stale state)."""
    if store.engine_state()[0] == EngineState.STOPPED:
        return False
    try:  # the pid file serving.process writes (read here by path: serving sits above this module)
        pid = int((settings.home / "engine.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


# --- versions and where they came from ---------------------------------------------------------------
def versions(store: Store, lineage_id: int | None = None) -> list[dict[str, Any]]:
    """The versions of a lineage (default: the current one) with how each was made."""
    lineage = store.get_lineage(lineage_id) if lineage_id is not None else store.current_lineage()
    if lineage is None:
        return []
    rows = store.policy_versions(lineage["id"])
    for row in rows:
        row["made_by"] = _made_by(store, row, rows)
    return rows


def _made_by(store: Store, row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    if row["version"] == 0:
        return "the base model"
    if row.get("run_id") is None:
        return f"{row['kind']} weights loaded from {row['weights']}"
    step = int(row["metrics"].get("global_step", 0))
    earlier = [r for r in rows if r.get("run_id") == row["run_id"] and r["version"] < row["version"]]
    first = int(earlier[-1]["metrics"].get("global_step", 0)) if earlier else 0
    names = store.step_metric_names(row["run_id"], first, step)
    steps = [f"{names['loss']} GRPO step(s)" if names.get("loss") else "",
             f"{names['sft_loss']} SFT pass(es)" if names.get("sft_loss") else ""]
    how = " + ".join(s for s in steps if s) or "training"
    return f"{how} ({row['kind']}) in {row['run_id']} iteration {row['iteration']}"


def version_row(store: Store, version: int, lineage_id: int | None = None) -> dict[str, Any]:
    for row in versions(store, lineage_id):
        if row["version"] == version:
            return row
    lineage = store.current_lineage()
    known = ", ".join(str(r["version"]) for r in versions(store, lineage_id)) or "none"
    raise NotFoundError(f"policy version {version} does not exist in this lineage"
                        + (f" ({lineage['base_name']})" if lineage else ""),
                        f"the versions are: {known}; `appliance model show` lists them")


def chain(store: Store, version: int, lineage_id: int | None = None) -> list[dict[str, Any]]:
    """The version and its ancestors down to the base, newest first."""
    by_version = {r["version"]: r for r in versions(store, lineage_id)}
    out, seen = [], set()
    v: int | None = version
    while v is not None and v in by_version and v not in seen:
        seen.add(v)
        out.append(by_version[v])
        v = by_version[v]["parent_version"]
    return out


def describe_version(store: Store, version: int, lineage_id: int | None = None) -> str:
    """"base model (NAME)" for version 0, else "v3, from run R iteration I" (or how it was loaded)."""
    lineage = store.get_lineage(lineage_id) if lineage_id is not None else store.current_lineage()
    if version == 0:
        return f"base model ({lineage['base_name']})" if lineage else "base model"
    try:
        row = version_row(store, version, lineage["id"] if lineage else None)
    except NotFoundError:
        return f"v{version}" + (f" (not in the lineage of {lineage['base_name']})" if lineage else "")
    if row.get("run_id"):
        return f"v{version}, from run {row['run_id']} iteration {row['iteration']}"
    return f"v{version} ({row['kind']} weights loaded from {row['weights']})"


def start_label(store: Store, run_id: str) -> str:
    """What iteration 0 of a run measured: "base model (...)" only when the run started on version 0."""
    iterations = store.iterations(run_id)
    if not iterations:
        return "not started"
    return describe_version(store, iterations[0].policy_version, store.run_lineage(run_id))


def served(store: Store) -> dict[str, Any]:
    """What the engine serves now: base, lineage, version, adapter, and the chain back to the base."""
    state, version, weights = store.engine_state()
    lineage = store.current_lineage()
    w = json.loads(weights) if weights else {}
    return {
        "lineage": lineage["id"] if lineage else None,
        "base": lineage["base_name"] if lineage else None,
        "base_path": lineage["base_path"] if lineage else None,
        "base_hash": lineage["content_hash"][:12] if lineage else None,
        "parameters": lineage["parameters"] if lineage else None,
        "policy_version": version,
        "adapter": w.get("lora"),
        "weights": w.get("full"),
        "describe": describe_version(store, version) if lineage else f"v{version} (no base recorded yet)",
        "chain": [r["version"] for r in chain(store, version)] if lineage else [],
    }


def served_short(store: Store) -> str:
    """"SmolLM2-135M-Instruct v3, lineage 1" (empty before a base is recorded): for tight headers."""
    lineage, version = store.current_lineage(), store.engine_state()[1]
    return f"{lineage['base_name']} v{version}, lineage {lineage['id']}" if lineage else ""


def served_line(store: Store) -> str:
    """One line for headers: "SmolLM2-135M-Instruct · v3, from run R iteration 2 · lineage 1 (v3 <- v2 <- base)"."""
    s = served(store)
    if s["lineage"] is None:
        return f"model: v{s['policy_version']} (base not recorded yet: the engine has not started here)"
    path = " <- ".join("base" if v == 0 else f"v{v}" for v in s["chain"]) or f"v{s['policy_version']}"
    adapter = f" · adapter {Path(s['adapter']).name}" if s["adapter"] else ""
    what = s["describe"] if s["policy_version"] else "base model"
    return f"model: {s['base']} · {what}{adapter} · lineage {s['lineage']} ({path})"


def show(store: Store) -> dict[str, Any]:
    """`appliance model show`: what is served, and every lineage with its versions."""
    return {"served": served(store), "line": served_line(store),
            "lineages": [{**lin, "versions": versions(store, lin["id"])} for lin in store.lineages()]}


# --- held-out results with intervals (for reports and the model card) -----------------------------------
def wilson_interval(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a pass rate (sensible at 0/n and n/n, unlike the normal one)."""
    if n == 0:
        return (0.0, 1.0)
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def heldout_results(store: Store, version: int, lineage_id: int) -> list[dict[str, Any]]:
    """Per (run, iteration) that measured this version: pass@1 overall and per family, with 95 % intervals."""
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for cell in store.version_evals(lineage_id, version):
        grouped.setdefault((cell["run_id"], cell["iteration"]), []).append(cell)
    out = []
    for (run_id, iteration), cells in grouped.items():
        families: dict[str, list[int]] = {}
        for c in cells:
            f = families.setdefault(c["family"], [0, 0])
            f[0] += c["passed"]
            f[1] += c["n"]
        passed, n = sum(c["passed"] for c in cells), sum(c["n"] for c in cells)
        out.append({"run_id": run_id, "iteration": iteration, "passed": passed, "n": n,
                    "interval": wilson_interval(passed, n),
                    "families": {f: {"passed": p, "n": m, "interval": wilson_interval(p, m)}
                                 for f, (p, m) in sorted(families.items())}})
    return out


def model_card(store: Store, version: int, *, merged: bool, lineage_id: int | None = None) -> str:
    """The README.md of an exported version: base, lineage, training, held-out results with intervals."""
    lineage = store.get_lineage(lineage_id) if lineage_id is not None else store.current_lineage()
    if lineage is None:
        raise NotFoundError("this data directory has no recorded base model",
                            "start the appliance once (`appliance run` or `appliance serve`)")
    rows = chain(store, version_row(store, version, lineage["id"])["version"], lineage["id"])
    what = ("the policy with its LoRA adapter merged into the base weights" if merged
            else "the policy's LoRA adapter alone (load it on top of the base model)")
    lines = [
        "---", f"base_model: {lineage['base_path']}", "library_name: " + ("transformers" if merged else "peft"),
        "tags: [appliance]", "---", "",
        f"# {lineage['base_name']} — appliance policy v{version}", "",
        f"This folder is {what}, exported by `appliance export`.", "",
        "## Base model", "",
        f"- name: {lineage['base_name']}", f"- path: {lineage['base_path']}",
        f"- model type: {lineage['model_type']}", f"- parameters: {lineage['parameters']:,}" if lineage["parameters"]
        else "- parameters: unknown", f"- content hash (sha256 of config and weights): {lineage['content_hash']}",
        f"- lineage {lineage['id']}, recorded at {lineage['reason']}", "",
        "## Lineage", "", "| version | parent | kind | made by |", "|---|---|---|---|",
    ]
    for r in reversed(rows):
        parent = "" if r["parent_version"] is None else \
            ("base" if r["parent_version"] == 0 else f"v{r['parent_version']}")
        lines.append(f"| {'base' if r['version'] == 0 else 'v' + str(r['version'])} | {parent} | {r['kind']} "
                     f"| {r['made_by']} |")
    lines += ["", "## Held-out results of this version", ""]
    results = heldout_results(store, version, lineage["id"])
    if not results:
        lines.append("No held-out evaluation measured this version.")
    for res in results:
        lo, hi = res["interval"]
        lines += [f"Run {res['run_id']}, iteration {res['iteration']}: pass@1 {res['passed']}/{res['n']} = "
                  f"{res['passed'] / res['n'] if res['n'] else 0:.1%} (95 % Wilson interval {lo:.1%}–{hi:.1%})", "",
                  "| family | passed | pass@1 | 95 % interval |", "|---|---|---|---|"]
        for family, f in res["families"].items():
            flo, fhi = f["interval"]
            lines.append(f"| {family} | {f['passed']}/{f['n']} | {f['passed'] / f['n'] if f['n'] else 0:.1%} "
                         f"| {flo:.1%}–{fhi:.1%} |")
        lines.append("")
    lines += ["## Use", ""]
    if merged:
        lines += ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
                  "model = AutoModelForCausalLM.from_pretrained(\"THIS_FOLDER\")",
                  "tokenizer = AutoTokenizer.from_pretrained(\"THIS_FOLDER\")", "```", "",
                  "or serve it: `vllm serve THIS_FOLDER`."]
    else:
        lines += ["```python", "from peft import PeftModel", "from transformers import AutoModelForCausalLM",
                  f"base = AutoModelForCausalLM.from_pretrained(\"{lineage['base_path']}\")",
                  "model = PeftModel.from_pretrained(base, \"THIS_FOLDER\")", "```", "",
                  f"or serve it: `vllm serve {lineage['base_path']} --enable-lora --lora-modules policy=THIS_FOLDER`."]
    return "\n".join(lines) + "\n"
