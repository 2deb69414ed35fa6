"""The model's identity and lineage, from the store and model folders alone (no engine, no torch)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.errors import ApplianceError, NotFoundError
from appliance.lineage import (
    ModelMismatch,
    chain,
    check_base,
    describe_version,
    model_card,
    model_identity,
    served_line,
    start_label,
    use_model,
    versions,
    wilson_interval,
)
from appliance.schemas import Checkpoint, EngineState
from appliance.store import Store


def fake_model(folder: Path, seed: int, shape: tuple[int, int] = (2, 3)) -> Path:
    """A model folder as far as identity goes: config.json and one safetensors file with made-up floats."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 10}))
    n = shape[0] * shape[1]
    header = json.dumps({"w": {"dtype": "F32", "shape": list(shape), "data_offsets": [0, 4 * n]}}).encode()
    data = struct.pack(f"<{n}f", *[float(seed + i) for i in range(n)])
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + data)
    return folder


def serve_version(store: Store, version: int, path: str, run_id: str | None, iteration: int | None,
                  global_step: int) -> None:
    """What a LEARN phase leaves behind: the engine's version row and the checkpoint row."""
    previous = store.engine_state()[1]
    store.add_policy_version(version, previous, "lora", path)
    store.set_engine_state(EngineState.STARTING, policy_version=version, force=True,
                           weights=json.dumps({"full": "/x", "lora": path, "adapter_name": f"policy-v{version}"}))
    store.add_checkpoint(Checkpoint(run_id, version, iteration, "lora", path, {"global_step": global_step}))


def test_identity_reads_type_parameters_and_content(tmp_path: Path) -> None:
    a = model_identity(fake_model(tmp_path / "a", seed=0, shape=(4, 5)))
    assert a["model_type"] == "llama" and a["parameters"] == 20 and a["name"] == "a"
    assert model_identity(fake_model(tmp_path / "a2", seed=0, shape=(4, 5)))["content_hash"] == a["content_hash"]
    assert model_identity(fake_model(tmp_path / "b", seed=1, shape=(4, 5)))["content_hash"] != a["content_hash"]
    with pytest.raises(ApplianceError, match="config.json is missing"):
        model_identity(tmp_path / "nowhere")


def test_first_start_records_the_base_and_another_model_is_refused(settings, store, tmp_path: Path) -> None:
    a, b = fake_model(tmp_path / "model-a", 0), fake_model(tmp_path / "model-b", 1)
    lineage = check_base(store, a)
    assert lineage["base_path"] == str(a.resolve()) and store.current_lineage()["id"] == lineage["id"]
    assert check_base(store, a)["id"] == lineage["id"]  # same model: fine, nothing new
    with pytest.raises(ModelMismatch) as e:
        check_base(store, b, home=settings.home)
    text = e.value.message + e.value.hint
    assert str(a.resolve()) in text and str(b.resolve()) in text
    assert "new data directory" in e.value.hint and f"appliance model use {b.resolve()}" in e.value.hint
    assert len(store.lineages()) == 1


def test_the_same_content_elsewhere_is_the_same_base(store, tmp_path: Path) -> None:
    a = fake_model(tmp_path / "a", 0)
    first = check_base(store, a)
    moved = a.rename(tmp_path / "moved")
    assert check_base(store, moved)["id"] == first["id"]
    assert store.current_lineage()["base_path"] == str(moved.resolve())
    (moved / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 11}))  # changed in place
    with pytest.raises(ModelMismatch):
        check_base(store, moved)


def test_a_store_from_before_lineages_refuses_the_other_model(store, settings, tmp_path: Path) -> None:
    # the bug this module fixes: the engine row names the old folder; the configuration names a new one
    a, b = fake_model(tmp_path / "a", 0), fake_model(tmp_path / "b", 1)
    run = store.create_run("run-old", {})
    store.set_engine_state(EngineState.STARTING, force=True, weights=json.dumps({"full": str(a)}))
    with pytest.raises(ModelMismatch, match="model-b|b is not the base"):
        check_base(store, b, checkpoints_dir=settings.checkpoints_dir)
    lineage = check_base(store, a, checkpoints_dir=settings.checkpoints_dir)
    assert store.run_lineage(run.id) == lineage["id"]  # what was there belongs to the recorded base


def test_model_use_starts_a_new_lineage_and_keeps_the_old_history(home, tmp_path: Path) -> None:
    a, b = fake_model(tmp_path / "a", 0), fake_model(tmp_path / "b", 1)
    s_a = load_settings(environ={"APPLIANCE_HOME": str(home), "APPLIANCE_ENGINE__MODEL": str(a)})
    s_b = load_settings(environ={"APPLIANCE_HOME": str(home), "APPLIANCE_ENGINE__MODEL": str(b)})
    store = Store(s_a.db_path)
    first = check_base(store, s_a.model_path)
    old_run = store.create_run("run-a", {})
    ckpt = s_a.checkpoints_dir / "v1"
    ckpt.mkdir(parents=True)
    serve_version(store, 1, str(ckpt), old_run.id, 1, 2)
    with pytest.raises(ApplianceError, match="not the configured model"):
        use_model(s_a, store, b)  # the configuration still names a: every start would refuse again
    new = use_model(s_b, store, b)
    assert new["id"] != first["id"] and new["base_path"] == str(b.resolve())
    assert store.engine_state()[1:] == (0, None)  # version 0 on the new base
    assert check_base(store, s_b.model_path)["id"] == new["id"]
    # the old lineage's checkpoints moved out of the way, and its rows followed
    archived = home / f"checkpoints-lineage-{first['id']}" / "v1"
    assert archived.is_dir() and not ckpt.exists()
    assert versions(store, first["id"])[1]["weights"] == str(archived)
    assert store.checkpoints(old_run.id)[0].path == str(archived)
    # runs carry their lineage: the new run is the new base's, the old one keeps its own
    assert store.run_lineage(old_run.id) == first["id"]
    assert store.run_lineage(store.create_run("run-b", {}).id) == new["id"]
    assert use_model(s_b, store)["id"] == new["id"]  # already the base: no new lineage
    assert len(store.lineages()) == 2
    store.close()


def test_model_use_refuses_while_the_engine_runs(settings, store, tmp_path: Path) -> None:
    import os

    check_base(store, fake_model(tmp_path / "a", 0))
    store.set_engine_state(EngineState.STARTING, force=True)
    settings.home.mkdir(parents=True, exist_ok=True)
    (settings.home / "engine.pid").write_text(str(os.getpid()))
    settings.engine.model = fake_model(tmp_path / "b", 1)
    with pytest.raises(ApplianceError, match="running"):
        use_model(settings, store)


def test_labels_say_where_a_run_started(store, tmp_path: Path) -> None:
    check_base(store, fake_model(tmp_path / "SmolThing", 0))
    first = store.create_run("run-1", {})
    store.start_iteration(first.id, 0, 0)
    assert start_label(store, first.id) == "base model (SmolThing)"
    for version in (1, 2, 3):
        store.add_metrics(first.id, version, {"loss": 0.1})
        serve_version(store, version, f"/ck/v{version}", first.id, version, version)
    second = store.create_run("run-2", {})
    store.start_iteration(second.id, 0, 3)  # continued from v3
    assert start_label(store, second.id) == "v3, from run run-1 iteration 3"
    assert describe_version(store, 0) == "base model (SmolThing)"
    assert [r["version"] for r in chain(store, 3)] == [3, 2, 1, 0]
    assert versions(store)[2]["made_by"] == "1 GRPO step(s) (lora) in run-1 iteration 2"
    assert "SmolThing" in served_line(store) and "v3 <- v2 <- v1 <- base" in served_line(store)


def test_model_card_names_base_lineage_training_and_heldout_with_intervals(store, tmp_path: Path) -> None:
    check_base(store, fake_model(tmp_path / "Base", 0))
    run = store.create_run("run-1", {})
    store.add_metrics(run.id, 1, {"sft_loss": 1.0})
    store.add_metrics(run.id, 2, {"loss": 0.5})
    serve_version(store, 1, "/ck/v1", run.id, 1, 2)
    store.set_eval(run.id, 1, 1, "files", 1, 10, 7)
    store.set_eval(run.id, 1, 1, "git", 1, 10, 3)
    store.set_eval(run.id, 0, 0, "files", 1, 10, 1)  # the base's numbers are not v1's
    card = model_card(store, 1, merged=True)
    assert "Base" in card and "content hash" in card and "parameters: 6" in card
    assert "| v1 | base | lora | 1 GRPO step(s) + 1 SFT pass(es) (lora) in run-1 iteration 1 |" in card
    lo, hi = wilson_interval(10, 20)
    assert f"pass@1 10/20 = 50.0% (95 % Wilson interval {lo:.1%}–{hi:.1%})" in card
    assert "| files | 7/10 |" in card and "1/10" not in card
    with pytest.raises(NotFoundError, match="version 7 does not exist"):
        model_card(store, 7, merged=True)


def test_wilson_interval() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35
    lo, hi = wilson_interval(5, 10)
    assert lo < 0.5 < hi and abs((lo + hi) / 2 - 0.5) < 1e-9


def test_reports_and_status_name_the_model(settings, store, tmp_path: Path) -> None:
    from appliance.diagnosis import build_report
    from appliance.status import read_status

    settings.engine.model = fake_model(tmp_path / "Base", 0)
    check_base(store, settings.model_path)
    first = store.create_run("run-1", {})
    serve_version(store, 1, "/ck/v1", first.id, 1, 0)
    second = store.create_run("run-2", {})
    store.start_iteration(second.id, 0, 1)
    store.set_eval(second.id, 0, 1, "files", 1, 4, 2)
    report, markdown = build_report(store, second.id, 0)
    assert report.model["start"] == "v1, from run run-1 iteration 1" and report.model["base"] == "Base"
    assert "**Model:** v1, from run run-1 iteration 1 · base Base (lineage 1" in markdown
    status = read_status(settings)
    assert status["model"]["base"] == "Base" and status["model"]["policy_version"] == 1
    assert status["model"]["chain"] == [1, 0] and "lineage 1 (v1 <- base)" in status["model"]["line"]


def test_doctor_reports_a_model_that_is_not_the_base(settings, store, tmp_path: Path) -> None:
    from appliance.doctor import check_model_identity

    settings.engine.model = fake_model(tmp_path / "a", 0)
    assert check_model_identity(settings).ok and store.current_lineage() is None  # read-only: records nothing
    check_base(store, settings.model_path)
    assert "is this data directory's base" in check_model_identity(settings).detail
    settings.engine.model = fake_model(tmp_path / "b", 1)
    check = check_model_identity(settings)
    assert not check.ok and "appliance model use" in check.hint
