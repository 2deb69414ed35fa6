"""Device load for the overview: GPUs through nvidia-smi when there are any, else CPU and RAM (psutil)."""

from __future__ import annotations

import shutil
import subprocess

import psutil

GPU_QUERY = "--query-gpu=index,utilization.gpu,memory.used,memory.total"


def system_probe() -> str:
    """One line; called from a worker thread a few times a second, so it must not block for long."""
    gpus = gpu_lines()
    if gpus:
        return " · ".join(gpus)
    mem = psutil.virtual_memory()
    return f"CPU {psutil.cpu_percent():.0f}% · RAM {mem.used / 2**30:.1f}/{mem.total / 2**30:.1f} GiB"


def gpu_lines() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", GPU_QUERY, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=2, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out)


def parse_nvidia_smi(out: str) -> list[str]:
    lines = []
    for row in out.strip().splitlines():
        try:
            index, util, used, total = (p.strip() for p in row.split(","))
            lines.append(f"GPU{index} {float(util):.0f}% {float(used) / 1024:.0f}/{float(total) / 1024:.0f} GiB")
        except ValueError:  # "[N/A]" fields on some boards: skip the board rather than fail the line
            continue
    return lines
