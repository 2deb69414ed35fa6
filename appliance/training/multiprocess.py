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

Every worker builds the same trainer from the latest checkpoint (or the phase's midway state), trains its
shard of each step's whole groups (see `distributed.py`), and rank 0 writes the checkpoint and `result.json`
(the steps' metrics, the checkpoint kind, its own load/train/save seconds). The parent steers them through
the job folder: every second it writes the loop's word (go, hold, stop) to `JOB/steer`, which rank 0 reads
before each optimizer step and broadcasts, so every rank holds or stops before the same step; rank 0 writes
the steps done to `JOB/progress`. On stop the ranks save the phase's midway state together (`midway.py`)
and the result says `interrupted`. The parent reads the result and records the rows in
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config import Settings, TrainingSettings
from appliance.errors import ApplianceError, WorkerError  # WorkerError importable from here as before
from appliance.training.midway import Midway

if TYPE_CHECKING:
    from appliance.training.learn import Steer

WORKER = ("appliance.training.worker",)  # `-m` module and arguments before the job file
LOG_TAIL_LINES = 30


@dataclass
class WorkerResult:
    steps: list[dict[str, float]]
    kind: str
    timings: dict[str, float] = field(default_factory=dict)  # rank 0's load_s, train_s, save_s
    wall_s: float = 0.0  # launch to exit, as the parent saw it
    interrupted: bool = False  # stopped between two steps: `steps` are those done, the midway state is saved


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
                work: Midway, midway: Path, resumed: bool, save_to: Path, job_dir: Path) -> dict[str, Any]:
    return {
        "training": cfg.model_dump(mode="json"), "base_model": str(base_model),
        "resume_from": str(resume_from) if resume_from is not None else None, "resume_kind": resume_kind,
        "work": work.as_json(), "midway": str(midway), "resumed": resumed, "save_to": str(save_to),
        "result": str(job_dir / "result.json"), "steer": str(job_dir / "steer"),
        "progress": str(job_dir / "progress"), "parent_pid": os.getpid(),
    }


def read_job(path: Path) -> dict[str, Any]:
    """The job as the worker uses it: settings and the phase's work rebuilt from their JSON (a resumed phase's
    from its midway folder, with SFT's optimizer state)."""
    from appliance.training.midway import load_midway

    job = json.loads(Path(path).read_text())
    job["training"] = TrainingSettings(**job["training"])
    work = Midway.from_json(job["work"])
    if job["resumed"]:
        work = load_midway(Path(job["midway"]), work.run_id, work.iteration) or work
    job["work"] = work
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
                     work: Midway, midway: Path, resumed: bool, save_to: Path,
                     steer: Steer | None = None) -> WorkerResult:
    """Run the phase's SFT and GRPO steps (what `work` has left) in `processes` workers; rank 0 saves to
    `save_to`, or, stopped between two steps, the ranks save the midway state to `midway`.

    `steer` is asked every second while they run; its word reaches the workers' next safe point, and they
    tell back the steps done. A stop lets the step in flight end and the state be saved (the result is
    `interrupted`); a shutdown that cannot wait for that ends this process, and the workers follow it."""
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "trainer.log"
    settings.home.mkdir(parents=True, exist_ok=True)
    for stale in settings.home.glob("train-job-*"):  # left by an appliance killed mid-phase (its workers exited)
        if not _job_processes(stale):
            shutil.rmtree(stale, ignore_errors=True)
    job_dir = Path(tempfile.mkdtemp(prefix="train-job-", dir=settings.home))
    try:
        payload = job_payload(settings.training, settings.model_path, resume_from=resume_from,
                              resume_kind=resume_kind, work=work, midway=midway, resumed=resumed, save_to=save_to,
                              job_dir=job_dir)
        result_path = Path(payload["result"])
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
                said = ""
                while (code := _wait(proc, 1.0)) is None:
                    if steer is None:
                        continue
                    if (progress := _read_progress(Path(payload["progress"]))) is not None:
                        steer.progress(*progress)
                    if (word := steer.word()) != said:
                        _write(Path(payload["steer"]), word)
                        said = word
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
        return WorkerResult(data["steps"], data["kind"], data["timings"], wall, bool(data.get("interrupted")))
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _read_progress(path: Path) -> tuple[int, int] | None:
    try:
        done, total = path.read_text().split()
        return int(done), int(total)
    except (OSError, ValueError):
        return None


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
