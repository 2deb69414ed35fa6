"""The engine on the CPU vLLM with the tiny model: state machine, weight sync both ways, canary, rollback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from appliance.errors import EngineError
from appliance.schemas import EngineState
from appliance.serving import Engine
from appliance.serving.canary import Canary, compare
from appliance.serving.process import command, environment
from appliance.serving.weights import ties_embeddings
from tiny_model import corrupt_checkpoint, make_tiny_lora, make_tiny_model  # tests/tiny_model.py


def test_launch_command_and_environment(settings) -> None:
    cmd = command(settings, Path("/w"), Path("/t"))
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enforce-eager", "--enable-lora"):
        assert flag in cmd
    assert "--tool-call-parser" not in cmd  # no model folder at /t: no parser fits (test_tool_calls.py)
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"  # the sampling distribution's logprobs
    assert "--enable-sleep-mode" not in cmd  # refuses to start on the CPU
    env = environment(settings)
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(settings.engine.cpu_kvcache_gib)


def test_tied_embeddings_are_detected(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"tie_word_embeddings": true}')
    assert ties_embeddings(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert not ties_embeddings(tmp_path)


def canary(engine: Engine) -> list[int]:
    return engine._canary().ids


@pytest.mark.slow
def test_serving_state_is_persisted_and_canary_is_deterministic(engine: Engine) -> None:
    assert engine.state == EngineState.SERVING
    assert engine.store.engine_state()[0] == EngineState.SERVING
    assert canary(engine) == canary(engine) == engine._canary_expected.ids
    assert len(engine._canary_expected.ids) == engine.settings.engine.canary_tokens
    assert engine._canary_expected.scored  # each token's log-probability and runner-up came back by id


@pytest.mark.slow
def test_pause_stops_admission_and_resume_serves_again(engine: Engine) -> None:
    assert engine.try_admit()
    engine.release()
    engine.pause_for_training()
    assert engine.state == EngineState.SLEEPING
    assert not engine.try_admit()
    with pytest.raises(EngineError, match="needs the engine serving"):
        engine.pause_for_training()
    engine.resume()
    assert engine.state == EngineState.SERVING
    states = [e.message for e in engine.store.events(kind="engine")][-5:]
    assert states == ["draining", "sleeping", "waking", "canary", "serving"]


@pytest.mark.slow
def test_lora_sync_changes_outputs_and_passes_the_canary(engine: Engine, tmp_path: Path) -> None:
    adapter = make_tiny_lora(tmp_path / "lora", engine._weights.full)
    before, version = canary(engine), engine.policy_version
    engine.pause_for_training()
    new_version = engine.load_weights(adapter, "lora")
    assert new_version == version + 1 == engine.policy_version
    assert engine.state == EngineState.SERVING
    assert engine.model_name() == f"policy-v{new_version}"
    after = canary(engine)
    assert after != before
    reference = engine.reference_canary(engine._weights)  # the trainer's greedy output, recomputed
    assert after == reference.ids
    # float32 on both sides: the same tokens, and their log-probabilities agree to a thousandth of a nat
    verdict = compare(engine._canary(), reference, 1e-3)
    assert verdict.ok and verdict.compared == len(after), verdict.detail
    assert engine.store.engine_state()[1] == new_version


@pytest.mark.slow
def test_full_sync_changes_outputs_and_passes_the_canary(engine: Engine, tmp_path: Path) -> None:
    folder = make_tiny_model(tmp_path / "full", engine.model_path, seed=7)
    before, version = canary(engine), engine.policy_version
    engine.pause_for_training()
    assert engine.load_weights(folder, "full") == version + 1
    assert engine.model_name() == "policy"  # full weights replace any adapter
    assert canary(engine) != before
    assert engine._weights.full == folder


@pytest.mark.slow
def test_corrupted_checkpoint_fails_and_old_weights_keep_serving(engine: Engine, tmp_path: Path) -> None:
    folder = corrupt_checkpoint(make_tiny_model(tmp_path / "bad", engine.model_path, seed=8))
    before, version, weights = canary(engine), engine.policy_version, engine._weights
    engine.pause_for_training()
    with pytest.raises(EngineError, match="weight sync"):
        engine.load_weights(folder, "full")
    assert engine.state == EngineState.SERVING
    assert engine.policy_version == version and engine._weights == weights
    assert canary(engine) == before
    errors = [e.message for e in engine.store.events(kind="error")]
    assert any("weight sync failed" in m for m in errors)


@pytest.mark.slow
def test_canary_mismatch_restores_the_previous_weights(engine: Engine, tmp_path: Path) -> None:
    # The checkpoint loads fine but the trainer says its weights give other tokens: the engine must not
    # serve what it loaded.
    folder = make_tiny_model(tmp_path / "other", engine.model_path, seed=9)
    shutil.copy(engine.model_path / "config.json", folder / "config.json")
    before, version = canary(engine), engine.policy_version
    engine.pause_for_training()
    with pytest.raises(EngineError, match="canary mismatch"):
        engine.load_weights(folder, "full", expected=Canary([0] * engine.settings.engine.canary_tokens))
    assert engine.state == EngineState.SERVING
    assert engine.policy_version == version
    assert canary(engine) == before


def test_a_taken_port_is_a_clear_error(settings, tmp_path: Path) -> None:
    import socket

    from appliance.serving.process import launch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        settings.engine.port = s.getsockname()[1]
        with pytest.raises(EngineError, match="already in use"):
            launch(settings, tmp_path, tmp_path)
