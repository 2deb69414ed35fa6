"""The model's identity with the real engine (one CPU vLLM start): another configured model is refused on a
used data directory; after `appliance model use` the engine serves exactly the new folder (transformers'
greedy output), and an exported version gives the engine's own greedy output under plain transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import load_settings
from appliance.lineage import ModelMismatch, check_base
from appliance.schemas import Checkpoint, EngineState
from appliance.serving import Engine, Weights
from appliance.store import Store
from appliance.training.export import export_version
from appliance.training.reference import greedy_token_ids
from small_run import free_port  # tests/small_run.py
from tiny_model import make_tiny_lora, make_tiny_model  # tests/tiny_model.py

PROMPT = [1, 504, 3458, 314, 260, 2367, 28, 9553, 30, 476]
N = 12


def greedy(engine: Engine) -> list[int]:
    r = engine._post("/v1/completions", json_body={
        "model": engine.model_name(), "prompt": PROMPT, "max_tokens": N, "temperature": 0.0, "seed": 0,
        "ignore_eos": True, "return_token_ids": True})
    return r.json()["choices"][0]["token_ids"]


@pytest.mark.slow
def test_a_new_model_is_refused_then_switched_to_served_and_exported(tmp_path: Path, tiny_model: Path) -> None:
    other = make_tiny_model(tmp_path / "other-model", tiny_model, seed=11)
    home = tmp_path / "home"
    env = {"APPLIANCE_HOME": str(home), "APPLIANCE_ENGINE__PORT": str(free_port()),
           "APPLIANCE_ENGINE__MAX_MODEL_LEN": "2048", "APPLIANCE_ENGINE__STARTUP_TIMEOUT_S": "900"}
    old_env, new_env = ({**env, "APPLIANCE_ENGINE__MODEL": str(tiny_model)},
                        {**env, "APPLIANCE_ENGINE__MODEL": str(other)})
    store = Store(load_settings(environ=old_env).db_path)
    # A used data directory: what the engine's starts on the tiny model recorded, a LoRA version on top.
    check_base(store, tiny_model)
    old_adapter = make_tiny_lora(home / "checkpoints" / "v1", tiny_model)
    store.add_policy_version(1, 0, "lora", str(old_adapter))
    store.set_engine_state(EngineState.STOPPED, policy_version=1, force=True,
                           weights=Weights(tiny_model, old_adapter, "policy-v1").to_json())

    settings = load_settings(environ=new_env)
    with pytest.raises(ModelMismatch) as refused:
        Engine(settings, store).start()
    text = refused.value.message + refused.value.hint
    assert str(tiny_model.resolve()) in text and str(other.resolve()) in text
    assert "new data directory" in text and "appliance model use" in text
    assert store.engine_state()[0] == EngineState.STOPPED and not (home / "engine.pid").exists()  # nothing launched

    r = CliRunner().invoke(main, ["model", "use", str(other)], env=new_env)
    assert r.exit_code == 0, r.output
    engine = Engine(settings, store)
    engine.start()
    try:
        cmdline = Path(f"/proc/{engine.pid}/cmdline").read_bytes().decode().split("\0")
        assert cmdline[cmdline.index("--model") + 1] == cmdline[cmdline.index("--tokenizer") + 1] == str(other)
        assert engine.policy_version == 0 and engine.model_name() == "policy"
        base_ids = greedy(engine)
        assert base_ids == greedy_token_ids(other, PROMPT, N)
        assert base_ids != greedy_token_ids(tiny_model, PROMPT, N)

        # a version of the new lineage, exported merged: plain transformers gives the engine's output
        run = store.create_run("run-b", {})
        adapter = make_tiny_lora(settings.checkpoints_dir / "v1", other, seed=5)
        engine.pause_for_training()
        assert engine.load_weights(adapter, "lora") == 1
        store.add_checkpoint(Checkpoint(run.id, 1, 1, "lora", str(adapter), {"global_step": 0}))
        served = greedy(engine)
        assert served != base_ids
        dest = export_version(store, tmp_path / "exported").dest
        assert greedy_token_ids(dest, PROMPT, N) == served
        card = (dest / "README.md").read_text()
        assert "other-model" in card and "| v1 | base | lora |" in card and "run-b iteration 1" in card
    finally:
        engine.stop()
    # the old lineage is kept, with its checkpoint folder archived; the new one is current
    lineages = store.lineages()
    assert [lin["base_name"] for lin in lineages] == [tiny_model.name, "other-model"]
    assert (home / f"checkpoints-lineage-{lineages[0]['id']}" / "v1" / "adapter_config.json").exists()
    assert json.loads(store.engine_state()[2])["lora"] == str(adapter)
    store.close()
