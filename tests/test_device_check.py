"""scripts/device_check, the prepared first minutes on a GPU machine, end to end on the CPU (--dry: tiny
shapes, the multi-process path over gloo), so that device time is spent on figures, not on fixing it; the
wheels it carries to the GPU machine (which lacks TRL, datasets, pydantic-settings and sqlite-utils); and
the GPU-only checks' code rehearsed on the CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts/device_check"
GPU_ONLY = ["lifecycle", "oom", "nccl", "kernels"]


def device_carry_module():
    spec = importlib.util.spec_from_file_location("device_carry", REPO / "scripts/device_carry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dry_run_gives_a_verdict_per_check_and_lists_the_carry(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    # no budget: a loaded CI machine must not turn the last checks into SKIPs
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--budget-s", "100000", "--json-out", str(out)],
                          capture_output=True, text=True, timeout=840, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdicts = [line.split()[1:3] for line in proc.stdout.splitlines() if line.startswith("VERDICT ")]
    assert verdicts == [["carry", "PASS:"], *([name, "SKIP:"] for name in GPU_ONLY), ["canary", "PASS:"],
                        ["canary-sharpened", "PASS:"], ["train-full", "PASS:"], ["train-lora", "PASS:"],
                        ["memory", "PASS:"], ["multi", "PASS:"]], proc.stdout
    assert "VERDICT lifecycle SKIP: GPU only" in proc.stdout
    figures = json.loads(out.read_text())
    # what would travel to the GPU machine: its missing packages' wheels, each listed with its size, under 64 MiB
    carry = figures["carry"]
    names = {w.split("-")[0].lower() for w in carry["wheels"]}
    assert {"trl", "datasets", "pydantic_settings", "pydantic_core", "sqlite_utils"} <= names
    assert all(f"MiB  {w}" in proc.stdout for w in carry["wheels"])
    assert carry["total_bytes"] < 64 * 2**20 and carry["total_bytes"] > carry["tree_bytes"]
    assert any("cp312" in w for w in carry["wheels"])  # the GPU machine's CPython, not this one's
    modes = {r["mode"]: r for r in figures["train"]["results"]}
    assert set(modes) == {"full", "lora", "plain"} and all(r["loss_finite"] for r in modes.values())
    assert modes["lora"]["trainable_params"] < modes["full"]["trainable_params"]
    assert all(r["value_head"] and r["gradient_checkpointing"] for r in figures["memory"]["results"])
    assert figures["canary"]["tolerance"] == 0.3 and figures["canary"]["max_abs_delta"] < 0.3
    assert "sharpened" in figures["canary-sharpened"]["source"]
    assert figures["multi"]["processes"] == 2


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_gpu_only_checks_rehearse_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry", "--rehearse", "--only", ",".join(GPU_ONLY),
                           "--budget-s", "100000", "--json-out", str(out)],
                          capture_output=True, text=True, timeout=840, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert [v["check"] for v in figures["verdicts"]] == ["carry", *GPU_ONLY]
    assert all(v["status"] == "PASS" for v in figures["verdicts"]), figures["verdicts"]
    assert figures["lifecycle"]["engine_calls"] == ["pause", "sync"] and figures["lifecycle"]["steps"] >= 1
    oom = figures["oom"]
    assert oom["engine_calls"] == ["pause", "resume"] and oom["raised"].startswith("OutOfMemoryError")
    assert oom["trainer_alive_at_wake"] is False  # the traceback's frames were cleared before the wake
    assert "torch.bfloat16" in figures["nccl"]["dtypes"] and "torch.float32" in figures["nccl"]["dtypes"]


def test_carried_wheels_are_installed_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU machine: the carried folder goes into a site folder first on the path, and is reported."""
    dc = device_carry_module()
    wheels = tmp_path / "carry"
    wheels.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                           "sqlite-fts4==1.0.3"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"no package index reachable: {proc.stderr[-300:]}")
    monkeypatch.setattr(dc, "CARRY_DIR", wheels)
    monkeypatch.setattr(dc, "CARRY_SITE", tmp_path / "site")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    lines = dc.install_carried()
    assert lines[0] == "carried: sqlite-fts4 1.0.3"
    assert sys.path[0] == str(tmp_path / "site") and (tmp_path / "site" / "sqlite_fts4").is_dir()
