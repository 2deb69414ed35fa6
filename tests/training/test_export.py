"""`appliance export` on the tiny model: merged and adapter folders that plain transformers/peft load with
the policy's greedy output, a model card with the lineage and numbers, and failures that leave nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import load_settings
from appliance.errors import NotFoundError
from appliance.lineage import check_base
from appliance.schemas import Checkpoint, EngineState
from appliance.store import Store
from appliance.training.export import ExportError, export_version
from appliance.training.reference import greedy_token_ids
from tiny_model import make_tiny_lora  # tests/tiny_model.py

PROMPT = [1, 504, 3458, 314, 260, 2367, 28, 9553]
N = 12


@pytest.fixture
def trained(tmp_path: Path, tiny_model: Path):
    """A data directory whose engine served the tiny model and then v1 (a LoRA adapter) made by run-1."""
    home = tmp_path / "home"
    settings = load_settings(environ={"APPLIANCE_HOME": str(home), "APPLIANCE_ENGINE__MODEL": str(tiny_model)})
    store = Store(settings.db_path)
    check_base(store, settings.model_path)
    run = store.create_run("run-1", {})
    adapter = make_tiny_lora(settings.checkpoints_dir / "v1", tiny_model)
    (adapter / "trainer").mkdir()
    (adapter / "trainer" / "optimizer.pt").write_bytes(b"not for export")
    store.add_metrics(run.id, 1, {"loss": 0.3})
    store.add_policy_version(1, 0, "lora", str(adapter))
    store.set_engine_state(EngineState.STOPPED, policy_version=1, force=True,
                           weights=json.dumps({"full": str(tiny_model), "lora": str(adapter),
                                               "adapter_name": "policy-v1"}))
    store.add_checkpoint(Checkpoint(run.id, 1, 1, "lora", str(adapter), {"global_step": 1}))
    store.set_eval(run.id, 1, 1, "files", 1, 8, 5)
    yield settings, store, adapter
    store.close()


def test_merged_export_loads_with_transformers_and_gives_the_policys_output(trained, tmp_path: Path) -> None:
    settings, store, adapter = trained
    dest = tmp_path / "out" / "policy-v1"
    result = export_version(store, dest)  # default: the version the engine serves
    assert result.version == 1 and result.kind == "merged" and result.dest == dest.resolve()
    expected = greedy_token_ids(settings.model_path, PROMPT, N, adapter_path=adapter)
    assert greedy_token_ids(dest, PROMPT, N) == expected  # plain transformers, no peft, no appliance
    assert greedy_token_ids(settings.model_path, PROMPT, N) != expected  # the adapter matters
    names = {p.name for p in dest.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "appliance-lineage.json"} <= names
    assert "trainer" not in names and not list(dest.parent.glob(".*partial"))
    card = (dest / "README.md").read_text()
    assert settings.model_path.name in card and str(settings.model_path.resolve()) in card
    assert "| v1 | base | lora | 1 GRPO step(s) (lora) in run-1 iteration 1 |" in card
    assert "pass@1 5/8 = 62.5% (95 % Wilson interval" in card
    facts = json.loads((dest / "appliance-lineage.json").read_text())
    assert [c["version"] for c in facts["chain"]] == [1, 0] and facts["heldout"][0]["passed"] == 5


def test_adapter_export_loads_with_peft_on_the_base(trained, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    settings, store, adapter = trained
    dest = export_version(store, tmp_path / "adapter", version=1, adapter=True).dest
    config = json.loads((dest / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(settings.model_path.resolve())
    assert not (dest / "trainer").exists() and (dest / "tokenizer.json").exists()
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(dest)).eval()
    with torch.inference_mode():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=N, do_sample=False, min_new_tokens=N)
    assert out[0, len(PROMPT):].tolist() == greedy_token_ids(settings.model_path, PROMPT, N, adapter_path=adapter)
    assert "PeftModel.from_pretrained" in (dest / "README.md").read_text()


def test_version_zero_is_the_base_and_has_no_adapter(trained, tmp_path: Path) -> None:
    settings, store, _ = trained
    dest = export_version(store, tmp_path / "base", version=0).dest
    assert (dest / "model.safetensors").read_bytes() == (settings.model_path / "model.safetensors").read_bytes()
    with pytest.raises(ExportError, match="no adapter"):
        export_version(store, tmp_path / "base-adapter", version=0, adapter=True)
    assert not (tmp_path / "base-adapter").exists()


def test_failures_are_clear_and_leave_nothing(trained, tmp_path: Path, monkeypatch) -> None:
    _, store, _ = trained
    with pytest.raises(NotFoundError, match="version 5 does not exist") as e:
        export_version(store, tmp_path / "a", version=5)
    assert "0, 1" in e.value.hint
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_version(store, full)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    with pytest.raises(ExportError, match="not enough disk space"):
        export_version(store, tmp_path / "b", disk_free=lambda _: 1000)

    def disk_full(*_, **__):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("appliance.lineage.model_card", disk_full)  # fails after the weights were written
    with pytest.raises(ExportError, match="No space left"):
        export_version(store, tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in ("home", "full")) == []
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder made for the export is fine
    monkeypatch.undo()
    assert (export_version(store, empty, version=0).dest / "README.md").exists()


def test_cli_model_show_use_and_export(trained, tmp_path: Path, tiny_model: Path) -> None:
    settings, store, _ = trained
    env = {"APPLIANCE_HOME": str(settings.home), "APPLIANCE_ENGINE__MODEL": str(tiny_model)}
    r = CliRunner().invoke(main, ["model", "show"], env=env)
    assert r.exit_code == 0 and "v1: 1 GRPO step(s) (lora) in run-1 iteration 1" in r.output
    r = CliRunner().invoke(main, ["export", "--version", "3", str(tmp_path / "x")], env=env)
    assert r.exit_code == 1 and "version 3 does not exist" in r.output and "hint:" in r.output
    r = CliRunner().invoke(main, ["model", "use", str(tmp_path)], env=env)
    assert r.exit_code == 1 and "not the configured model" in r.output
    r = CliRunner().invoke(main, ["export", "--json", "--version", "0", str(tmp_path / "y")], env=env)
    assert r.exit_code == 0 and json.loads(r.output)["kind"] == "base"
