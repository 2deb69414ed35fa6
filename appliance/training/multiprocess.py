"""A LEARN phase's training in N worker processes (training.processes > 1), launched through accelerate.

The parent (the appliance process, which paused serving) writes a job folder and runs

    python -m accelerate.commands.launch --config_file JOB/accelerate.json --num_processes N \\
        -m appliance.training.worker JOB/job.json

`accelerate launch` with a MULTI_GPU config starts the workers with torch's elastic launcher (torchrun):
RANK/WORLD_SIZE/MASTER_* set, a free rendezvous port, and when one worker fails the others are stopped
and the launcher exits non-zero. The same launcher serves the CPU: each worker then builds accelerate's
state with `cpu=True`, which makes it a MULTI_CPU process group over gloo (NCCL on GPUs). Accelerate's own
`--cpu --num_processes N` path is not used: it starts a single process unless it is given an MPI hostfile
(`--mpirun_hostfile`, `mpirun`), and there is no MPI here. The job's own config file keeps a user's
accelerate default config (~/.cache/huggingface/accelerate) out of it.

Every worker builds the same trainer from the latest checkpoint, trains its shard of each step's whole
groups (see `distributed.py`), and rank 0 writes the checkpoint and `result.json` (the steps' metrics,
the checkpoint kind, its own load/train/save seconds). The parent reads the result and records the rows in
the store (workers never write to it). A launcher that exits non-zero, or no result, is a `TrainingError`
carrying the exit code and the tail of the workers' log (`$APPLIANCE_HOME/logs/trainer.log`). The
launcher runs in its own process group, which is killed on the way out whatever happened, and every
worker also exits by itself when the parent process disappears; no worker outlives its phase.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import Settings, TrainingSettings
from appliance.errors import ApplianceError, Interrupted, WorkerError  # WorkerError importable from here as before
from appliance.schemas import Sample
from appliance.training.advantages import GroupedBatch

WORKER = ("appliance.training.worker",)  # `-m` module and arguments before the job file
LOG_TAIL_LINES = 30


@dataclass
class WorkerResult:
    steps: list[dict[str, float]]
    kind: str
    timings: dict[str, float] = field(default_factory=dict)  # rank 0's load_s, train_s, save_s
    wall_s: float = 0.0  # launch to exit, as the parent saw it


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_processes(cfg: TrainingSettings, gpus: int | None = None) -> int:
    """How many trainer processes a LEARN phase uses: `training.processes`, 0 = one per visible GPU (min 1)."""
    if cfg.processes == 1:
        return 1  # the in-process path: no GPU query, no torch import here
    gpus = visible_gpus() if gpus is None else gpus
    if cfg.processes == 0:
        return max(1, gpus)
    if gpus and cfg.processes > gpus:
        raise ApplianceError(
            f"training.processes is {cfg.processes} but only {gpus} GPU(s) are visible",
            "set training.processes to at most the number of GPUs (0 = one per visible GPU)",
        )
    return cfg.processes


def job_payload(cfg: TrainingSettings, base_model: Path, *, resume_from: Path | None, resume_kind: str | None,
                sft_samples: list[Sample], parts: list[GroupedBatch], save_to: Path, result: Path) -> dict[str, Any]:
    return {
        "training": cfg.model_dump(mode="json"), "base_model": str(base_model),
        "resume_from": str(resume_from) if resume_from is not None else None, "resume_kind": resume_kind,
        "sft_samples": [asdict(s) for s in sft_samples], "parts": [asdict(p) for p in parts],
        "save_to": str(save_to), "result": str(result), "parent_pid": os.getpid(),
    }


def read_job(path: Path) -> dict[str, Any]:
    """The job as the worker uses it: settings and records rebuilt from their JSON."""
    job = json.loads(Path(path).read_text())
    job["training"] = TrainingSettings(**job["training"])
    job["sft_samples"] = [Sample(**s) for s in job["sft_samples"]]
    job["parts"] = [GroupedBatch(**{**p, "samples": [Sample(**s) for s in p["samples"]]}) for p in job["parts"]]
    return job


def launch_command(job_dir: Path, processes: int, worker: tuple[str, ...] = WORKER) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(job_dir / "accelerate.json"),
            "--num_processes", str(processes), "-m", *worker, str(job_dir / "job.json")]


def accelerate_config(processes: int) -> dict[str, Any]:
    # MULTI_GPU selects accelerate's torchrun launcher; on a CPU box the workers ask for gloo themselves.
    return {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", "mixed_precision": "no",
            "use_cpu": False, "debug": False, "num_processes": processes, "num_machines": 1, "machine_rank": 0,
            "gpu_ids": "all", "main_process_port": 0, "rdzv_backend": "static", "same_network": True,
            "dynamo_config": {"dynamo_backend": "NO"}}


def worker_environment(processes: int) -> dict[str, str]:
    env = dict(os.environ)
    cpus = len(os.sched_getaffinity(0))
    env.setdefault("OMP_NUM_THREADS", str(max(1, cpus // processes)))  # torchrun would pin every worker to 1
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1"})
    return env


def train_in_workers(settings: Settings, processes: int, *, resume_from: Path | None, resume_kind: str | None,
                     sft_samples: list[Sample], parts: list[GroupedBatch], save_to: Path,
                     should_stop: Callable[[], bool] | None = None) -> WorkerResult:
    """Run the phase's SFT and GRPO steps in `processes` workers; rank 0 saves to `save_to`.

    `should_stop` is asked every second while they run: when it says yes the workers are killed and
    Interrupted is raised (a shutdown does not wait for the phase; nothing was saved that counts)."""
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "trainer.log"
    settings.home.mkdir(parents=True, exist_ok=True)
    for stale in settings.home.glob("train-job-*"):  # left by an appliance killed mid-phase (its workers exited)
        if not _job_processes(stale):
            shutil.rmtree(stale, ignore_errors=True)
    job_dir = Path(tempfile.mkdtemp(prefix="train-job-", dir=settings.home))
    try:
        result_path = job_dir / "result.json"
        payload = job_payload(settings.training, settings.model_path, resume_from=resume_from,
                              resume_kind=resume_kind, sft_samples=sft_samples, parts=parts, save_to=save_to,
                              result=result_path)
        (job_dir / "job.json").write_text(json.dumps(payload))
        (job_dir / "accelerate.json").write_text(json.dumps(accelerate_config(processes)))
        cmd = launch_command(job_dir, processes, WORKER)
        with open(log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')}: {processes} trainer processes, job {job_dir}\n"
                      .encode())
            log.flush()
            offset = log.tell()
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, env=worker_environment(processes), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                while (code := _wait(proc, 1.0)) is None:
                    if should_stop is not None and should_stop():
                        raise Interrupted("training ran into the shutdown")
            finally:
                _stop(proc, job_dir)
            wall = time.perf_counter() - t0
        if code != 0 or not result_path.exists():
            what = f"exited with code {code}" if code != 0 else "exited without writing a result"
            raise WorkerError(
                f"the training workers ({processes} processes) {what}; the end of their log:\n"
                + _tail(log_path, offset),
                f"the whole log is {log_path}; set training.processes = 1 to train in the appliance's own process",
            )
        data = json.loads(result_path.read_text())
        return WorkerResult(data["steps"], data["kind"], data["timings"], wall)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _wait(proc: subprocess.Popen, seconds: float) -> int | None:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _stop(proc: subprocess.Popen, job_dir: Path) -> None:
    """Kill the launcher's process group and any worker of this job still alive (they are ours by job path)."""
    from appliance.serving.process import kill

    kill(proc, grace_s=10.0)
    for pid in _job_processes(job_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _job_processes(job_dir: Path) -> list[int]:
    """Live processes whose command line names this job's folder (launcher and workers)."""
    needle = str(job_dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _tail(path: Path, offset: int, lines: int = LOG_TAIL_LINES) -> str:
    """This launch's part of the log: torchrun's root-cause section (the failing rank's traceback) when it
    wrote one, else the last `lines` lines."""
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace").rstrip().splitlines()
    starts = [i for i, line in enumerate(text) if line.startswith("Root Cause")]
    if starts:
        return "\n".join(text[starts[-1]:][: lines * 2])
    return "\n".join(text[-lines:])
