"""The engine's GPU paths against a scripted vLLM (appliance/testing/vllm.py): sleep levels 1 and 2, wake by
tags, in-place reload, LoRA and full syncs, the bf16 canary tolerance and rollback. No GPU and no vLLM: the
order of calls and the state machine are proven here, so that device time only confirms vLLM's side."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.errors import EngineError
from appliance.schemas import EngineState
from appliance.serving import Engine, process, supervisor
from appliance.store import Store
from appliance.testing.vllm import ScriptedVLLM


def model_folder(path: Path, *, tied: bool = False) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "tie_word_embeddings": tied}))
    # a one-tensor safetensors file (the lineage reads its header), different per folder
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(path.name)], "data_offsets": [0, len(path.name)]}})
    (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header.encode() + path.name.encode())
    return path


def calls(vllm: ScriptedVLLM) -> list[str]:
    """The requests so far, without the supervisor's health probes; and forget them."""
    seen = [c for c in vllm.calls if c != "GET /health"]
    vllm.calls.clear()
    return seen


@pytest.fixture(params=[1, 2], ids=["level1", "level2"])
def level(request: pytest.FixtureRequest) -> int:
    return request.param


@pytest.fixture
def noise() -> float:
    """What bf16 serving adds to every canary log-probability against the float32 reference (within 0.3)."""
    return 0.05


@pytest.fixture
def gpu(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: int, noise: float):
    """(engine, scripted vLLM) on the gpu profile's engine settings, started and serving."""
    settings.profile = "gpu"
    settings.engine.enable_sleep_mode = True
    settings.engine.sleep_level = level
    settings.engine.canary_tolerance = 0.3  # the gpu profile's
    settings.engine.dtype = "bfloat16"
    settings.engine.model = model_folder(tmp_path / "base")
    vllm = ScriptedVLLM(canary_tokens=settings.engine.canary_tokens, noise=noise)
    monkeypatch.setattr(process, "launch", vllm.launch)
    monkeypatch.setattr(process, "wait_healthy", vllm.wait_healthy)
    monkeypatch.setattr(process, "kill", vllm.kill)
    monkeypatch.setattr(supervisor, "CHECK_S", 0.05)  # the supervisor looks often: what it would do, it does now
    store = Store(settings.db_path)
    engine = Engine(settings, store)
    engine._http = vllm.client(engine.base_url)
    monkeypatch.setattr(engine, "reference_canary", vllm.reference)  # the trainer's float32 side
    engine.start()
    assert calls(vllm) == ["POST /tokenize", "POST /v1/completions"]  # the start-up canary's baseline
    yield engine, vllm
    engine.stop()
    store.close()


def states(engine: Engine, n: int) -> list[str]:
    return [e.message for e in engine.store.events(kind="engine")][-n:]


def test_launch_command_on_the_gpu_profile(settings: Settings) -> None:
    settings.profile, settings.engine.enable_sleep_mode, settings.engine.tensor_parallel_size = "gpu", True, 4
    settings.engine.gpu_memory_utilization, settings.engine.enforce_eager = 0.85, False
    cmd = process.command(settings, Path("/w"), Path("/t"))
    assert "--enable-sleep-mode" in cmd and "--enforce-eager" not in cmd
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "4"
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.85"
    env = process.environment(settings)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # /sleep, /wake_up and /collective_rpc are dev-mode routes


def test_the_gpu_launch_frees_the_graph_pool_at_sleep_and_compiles_nothing_with_nvcc(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: sleep kept the CUDA-graph pool; FlashInfer's sampler and the TP>1 all-reduce fusion JIT-compile
    with nvcc, which the image lacks; Model Runner V2's fallback switch reaches the engine."""
    settings.profile, settings.engine.enable_sleep_mode, settings.engine.tensor_parallel_size = "gpu", True, 2
    cmd = process.command(settings, Path("/w"), Path("/t"))
    assert "--sleep-mode-offload-cudagraph" in cmd  # vLLM 0.32's flag (vllm serve --help)
    assert json.loads(cmd[cmd.index("--compilation-config") + 1]) == {"pass_config": {"fuse_allreduce_rms": False}}
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    env = process.environment(settings)
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    settings.engine.tensor_parallel_size = 1  # no all-reduce to fuse
    assert "--compilation-config" not in process.command(settings, Path("/w"), Path("/t"))
    settings.profile = "cpu"  # the CPU build has no sleep mode and no FlashInfer
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in process.environment(settings)


def test_the_gpu_profile_waits_longer_for_a_cold_start(home: Path) -> None:
    gpu = load_settings(environ={"APPLIANCE_HOME": str(home), "APPLIANCE_PROFILE": "gpu"})
    assert gpu.engine.startup_timeout_s >= 1200  # compiling CUDA graphs, LoRA's too, took 300 s and more


def test_pause_sleeps_and_resume_wakes_at_the_level(gpu, level: int) -> None:
    engine, vllm = gpu
    engine.pause_for_training()
    assert calls(vllm) == [f"POST /sleep?level={level}"] and vllm.sleeping == {"weights": True, "kv_cache": True}
    assert not engine.try_admit()
    engine.resume()
    # level 2 dropped the weights: the engine must load them again before the canary
    reload = ["POST /collective_rpc", "POST /reset_prefix_cache"] if level == 2 else []
    assert calls(vllm) == ["POST /wake_up", *reload, "POST /v1/completions"]
    assert engine.state == EngineState.SERVING and vllm.full == engine.model_path
    assert states(engine, 5) == ["draining", "sleeping", "waking", "canary", "serving"]


def test_a_level_2_wake_without_reload_is_caught_by_the_canary(gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, vllm = gpu
    if engine.settings.engine.sleep_level != 2:
        pytest.skip("level 1 keeps the weights in host memory")
    monkeypatch.setattr(engine, "_reload_full", lambda folder: None)  # the bug this guards against
    engine.pause_for_training()
    with pytest.raises(EngineError, match="canary after wake-up"):
        engine.resume()
    assert engine.state == EngineState.FAILED  # the supervisor restarts it from disk


def test_lora_sync_wakes_weights_first_and_kv_cache_last(gpu, level: int, tmp_path: Path) -> None:
    engine, vllm = gpu
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    engine.pause_for_training()
    calls(vllm)
    assert engine.load_weights(adapter, "lora") == 1
    base_back = ["POST /collective_rpc", "POST /reset_prefix_cache"] if level == 2 else []
    assert calls(vllm) == ["POST /wake_up?tags=weights", *base_back, "POST /v1/load_lora_adapter",
                           "POST /wake_up?tags=kv_cache", "POST /v1/completions"]
    assert engine.model_name() == "policy-v1" and vllm.adapters == {"policy-v1": adapter}
    [info] = [e for e in engine.store.events() if e.message.startswith("canary within 0.3 nats")]
    assert info.data["max_abs_delta"] == pytest.approx(0.05)  # bf16's drift, recorded as evidence


def test_full_sync_reloads_in_place_or_restarts_a_tied_model(gpu, tmp_path: Path) -> None:
    engine, vllm = gpu
    untied = model_folder(tmp_path / "v1")
    engine.pause_for_training()
    calls(vllm)
    assert engine.load_weights(untied, "full") == 1
    assert calls(vllm) == ["POST /wake_up?tags=weights", "POST /collective_rpc", "POST /reset_prefix_cache",
                           "POST /wake_up?tags=kv_cache", "POST /v1/completions"]
    assert vllm.full == untied and len(vllm.launches) == 1
    # tied embeddings: vLLM's in-place reload leaves the lm_head stale, so the server restarts on the folder
    tied = model_folder(tmp_path / "v2", tied=True)
    engine.pause_for_training()
    assert engine.load_weights(tied, "full") == 2
    assert vllm.launches[-1] == tied and vllm.full == tied and engine.state == EngineState.SERVING


def test_a_canary_beyond_the_tolerance_restores_the_previous_weights(gpu, tmp_path: Path) -> None:
    engine, vllm = gpu
    vllm.adapter_noise = 0.35  # with the adapter the engine strays 0.4 nats from the trainer: over 0.3
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    engine.pause_for_training()
    with pytest.raises(EngineError, match=r"canary mismatch.*\|delta\| 0\.4"):
        engine.load_weights(adapter, "lora")
    # the base serves again, awake, the refused adapter unloaded, checked against its own start-up canary
    assert engine.state == EngineState.SERVING and engine.policy_version == 0
    assert engine.model_name() == "policy" and vllm.adapters == {} and not any(vllm.sleeping.values())
    assert any("weight sync failed, restoring" in e.message for e in engine.store.events(kind="error"))


def test_a_wrong_adapter_is_a_divergence_not_a_near_tie(gpu, tmp_path: Path) -> None:
    engine, vllm = gpu
    adapter, other = tmp_path / "adapter", tmp_path / "other"
    adapter.mkdir()
    engine.pause_for_training()
    expected = vllm.canary_for(engine.model_path, other, 0.0)  # the trainer trained something else
    with pytest.raises(EngineError, match="canary mismatch"):
        engine.load_weights(adapter, "lora", expected=expected)
    assert engine.state == EngineState.SERVING and engine.policy_version == 0


def test_a_failed_sleep_leaves_the_engine_failed_not_draining(gpu) -> None:
    # DRAINING admits nothing and neither resume nor a sync accepts it: stuck there, nothing would serve again
    engine, vllm = gpu
    vllm.fail["/sleep"] = "CUDA error: out of memory"
    with pytest.raises(EngineError, match="/sleep answered 500"):
        engine.pause_for_training()
    assert engine.state == EngineState.FAILED  # what the supervisor restarts from disk
    assert any("sleep failed" in (e.message + json.dumps(e.data)) for e in engine.store.events())


# --- the lifecycle's failures (issue 46, item 5) ------------------------------------------------------

def events_like(engine: Engine, text: str, timeout_s: float = 5.0) -> list[str]:
    """The events whose message holds `text`, waiting up to `timeout_s` for the first."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [e.message for e in engine.store.events() if text in e.message]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_failed_wake_up_fails_the_engine_and_it_is_relaunched(gpu) -> None:
    engine, vllm = gpu
    engine.pause_for_training()
    vllm.fail["/wake_up"] = "CUDA error: an illegal memory access was encountered"
    with pytest.raises(EngineError, match="/wake_up answered 500"):
        engine.resume()
    assert engine.state == EngineState.FAILED  # it stayed WAKING, which nothing leaves
    assert engine.wait_serving(10) and len(vllm.launches) == 2  # the supervisor started it again
    assert engine.try_admit()
    engine.release()


def test_a_canary_that_cannot_run_after_a_wake_fails_the_engine(gpu) -> None:
    engine, vllm = gpu
    engine.pause_for_training()
    vllm.fail["/v1/completions"] = "the engine core died"
    with pytest.raises(EngineError, match="completions answered 500"):
        engine.resume()
    assert engine.state == EngineState.FAILED  # not CANARY for good
    assert engine.wait_serving(10)


@pytest.mark.parametrize("then", ["resume", "lora", "full"])
def test_an_engine_that_dies_asleep_is_started_when_next_needed_not_on_the_trainers_gpus(
        gpu, tmp_path: Path, then: str) -> None:
    engine, vllm = gpu
    engine.pause_for_training()
    vllm.proc.die()
    noted = events_like(engine, "died while the engine was sleeping")
    time.sleep(0.2)  # several more looks by the supervisor
    assert len(vllm.launches) == 1 and engine.state == EngineState.SLEEPING  # the trainer has the GPUs
    assert len(noted) == 1, "the supervisor should say once why it leaves the engine down"
    if then == "resume":
        engine.resume()
        assert vllm.launches[-1] == engine.model_path and engine.policy_version == 0
    elif then == "lora":
        adapter = tmp_path / "adapter"
        adapter.mkdir()
        assert engine.load_weights(adapter, "lora") == 1
        assert vllm.launches[-1] == engine.model_path and vllm.adapters == {"policy-v1": adapter}
    else:
        folder = model_folder(tmp_path / "v1")
        assert engine.load_weights(folder, "full") == 1
        assert vllm.launches[-1] == folder
    assert len(vllm.launches) == 2 and engine.state == EngineState.SERVING and not any(vllm.sleeping.values())
    assert events_like(engine, "starting it on")


def test_moving_the_weights_has_its_own_longer_bound(gpu, tmp_path: Path) -> None:
    """The client's 120 s also bounded sleep, wake-up and reload, which move the whole model (minutes)."""
    engine, vllm = gpu
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    engine.pause_for_training()
    engine.load_weights(model_folder(tmp_path / "v1"), "full")
    engine.pause_for_training()
    engine.load_weights(adapter, "lora")
    for path in ("/sleep", "/wake_up", "/collective_rpc", "/v1/load_lora_adapter"):
        assert vllm.timeouts[path] >= 600, (path, vllm.timeouts)
        assert vllm.timeouts[path] == engine.settings.engine.weights_timeout_s
    assert vllm.timeouts["/v1/completions"] == engine._http.timeout.read  # a generation keeps the client's bound


# --- the canary on bf16 (issue 46, item 4) -----------------------------------------------------------

@pytest.mark.parametrize("noise", [0.5])
def test_a_constant_offset_at_the_base_passes_every_sync_and_a_divergence_still_fails(gpu, tmp_path: Path) -> None:
    """bf16 logits moved every canary token 0.5 nats from the float32 reference, on the base as after a
    sync: the fixed 0.3 tolerance rolled back every sync. Judged against the offset measured at the base,
    a sync that changes nothing else passes; other weights still fail."""
    engine, vllm = gpu
    adapters = [tmp_path / f"adapter{i}" for i in range(4)]
    for a in adapters:
        a.mkdir()
    engine.pause_for_training()
    assert engine.load_weights(adapters[0], "lora") == 1 and engine.state == EngineState.SERVING
    [offset] = [e for e in engine.store.events() if e.message.startswith("canary offset")]
    assert offset.data["offset"] == pytest.approx(0.5) and "+0.5000" in offset.message
    [info] = [e for e in engine.store.events() if e.message.startswith("canary within")]
    assert info.data["max_abs_delta"] == pytest.approx(0.5) and info.data["offset"] == pytest.approx(0.5)
    engine.pause_for_training()
    engine.resume()  # a wake compares the engine with its own output after the sync
    engine.pause_for_training()
    assert engine.load_weights(adapters[1], "lora") == 2  # measured once, used at every sync
    assert len([e for e in engine.store.events() if e.message.startswith("canary offset")]) == 1
    engine.pause_for_training()
    other = vllm.canary_for(engine.model_path, tmp_path / "other", 0.0)  # the trainer trained something else
    with pytest.raises(EngineError, match="canary mismatch"):
        engine.load_weights(adapters[2], "lora", expected=other)
    assert engine.policy_version == 2 and engine.state == EngineState.SERVING and engine.model_name() == "policy-v2"
    vllm.adapter_noise = 0.4  # the engine strays 0.4 nats beyond its offset (with every adapter, here)
    engine.pause_for_training()
    with pytest.raises(EngineError, match=r"canary mismatch.*\|delta\| 0\.9000 beyond the engine's offset"):
        engine.load_weights(adapters[3], "lora")
    assert engine.policy_version == 2
