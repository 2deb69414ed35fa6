"""scripts/gpu_smoke, the engine's weight lifecycle on the first rented GPU server: what it explains and that it
refuses a machine without a GPU (the walk itself needs one: docs/DEPLOYMENT.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts/gpu_smoke"


def run(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path if path is not None else os.environ["PATH"]}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_help_explains_the_walk() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    steps = ["1 start", "2 canary", "3 sleep level 1", "4 wake", "5 load adapter", "6 reload weights",
             "7 sleep level 2", "8 stop"]
    positions = [proc.stdout.index(s) for s in steps]
    assert positions == sorted(positions), proc.stdout
    assert "appliance.serving.process" in proc.stdout and "GPU memory" in proc.stdout
    assert "|delta logprob|" in proc.stdout and "localhost/appliance:gpu" in proc.stdout


def test_it_refuses_a_machine_without_a_gpu(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # no nvidia-smi on PATH; python is called by its full path
    bare.mkdir()
    proc = run("--model", str(tmp_path), path=str(bare))
    assert proc.returncode == 2
    assert "no usable NVIDIA GPU here: no NVIDIA GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_it_refuses_an_old_driver_with_the_fix(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    smi = bare / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15'\n")
    smi.chmod(0o755)
    proc = run("--model", str(tmp_path), path=str(bare))
    assert proc.returncode == 2 and "driver 550.54.15" in proc.stderr and "fix:" in proc.stderr


# --- the walk against the scripted vLLM (appliance/testing/vllm.py): vLLM 0.32's routes and sleep semantics ---

def gpu_smoke_module():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("gpu_smoke", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_smoke", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def scripted_walk(tmp_path: Path, monkeypatch, **fail: str):
    from types import SimpleNamespace

    from appliance.config import load_settings
    from appliance.serving import canary, process
    from appliance.testing.vllm import ScriptedVLLM

    smoke = gpu_smoke_module()
    model, adapter = tmp_path / "model", tmp_path / "adapter"
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path / "home"), "APPLIANCE_PROFILE": "gpu",
                                      "APPLIANCE_ENGINE__MODEL": str(model)})
    vllm = ScriptedVLLM(canary_tokens=settings.engine.canary_tokens, noise=0.05)  # bf16 against float32
    vllm.fail.update(fail)
    for name in ("launch", "wait_healthy", "kill"):
        monkeypatch.setattr(process, name, getattr(vllm, name))
    monkeypatch.setattr(canary, "reference", lambda _settings, full, lora, _prompt: vllm.reference(
        SimpleNamespace(full=full, lora=lora)))
    monkeypatch.setattr(smoke, "gpu_memory_mib", lambda: 1234)
    model.mkdir()
    adapter.mkdir()
    steps = smoke.walk(settings, model, adapter, tmp_path, http=vllm.client())
    return steps, vllm


def test_the_walk_keeps_vllms_order_and_checks_the_canary_at_each_step(tmp_path: Path, monkeypatch, capsys) -> None:
    steps, vllm = scripted_walk(tmp_path, monkeypatch)
    assert [(s["step"], s["status"]) for s in steps] == [
        ("start", "PASS"), ("canary", "PASS"), ("sleep-1", "PASS"), ("wake", "PASS"), ("load-adapter", "PASS"),
        ("reload", "PASS"), ("sleep-2", "PASS"), ("stop", "PASS")], steps
    assert all(s["gpu_memory_mib"] == 1234 and s["seconds"] >= 0 for s in steps)
    out = capsys.readouterr().out
    assert "engine command (appliance.serving.process.command):" in out and "--enable-sleep-mode" in out
    assert "offset +0.0500" in out and "|delta logprob| max" in out
    routes = [c.split("?")[0] for c in vllm.calls if not c.endswith("/v1/completions")]
    assert routes == ["POST /tokenize", "POST /sleep", "POST /wake_up", "POST /v1/load_lora_adapter",
                      "POST /collective_rpc", "POST /reset_prefix_cache", "POST /sleep", "POST /wake_up",
                      "POST /collective_rpc", "POST /wake_up", "POST /reset_prefix_cache"]
    assert "POST /sleep?level=2" in vllm.calls and "POST /wake_up?tags=weights" in vllm.calls
    assert vllm.proc is not None and vllm.proc.poll() is not None  # stopped


def test_a_failed_step_stops_the_walk_and_the_engine(tmp_path: Path, monkeypatch) -> None:
    steps, vllm = scripted_walk(tmp_path, monkeypatch, **{"/wake_up": "CUDA error: out of memory"})
    assert [(s["step"], s["status"]) for s in steps] == [
        ("start", "PASS"), ("canary", "PASS"), ("sleep-1", "PASS"), ("wake", "FAIL"), ("stop", "PASS")]
    assert "CUDA error: out of memory" in steps[3]["text"]
    assert vllm.proc.poll() is not None
