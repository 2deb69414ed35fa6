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
