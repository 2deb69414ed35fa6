"""One process of a multi-process LEARN phase: `python -m appliance.training.worker JOB.json`.

Started by `accelerate launch` (see `multiprocess.py`), never by hand. It joins the process group
(accelerate's state: NCCL on a GPU, one GPU per process; gloo on the CPU), builds the trainer from the
job's checkpoint exactly as the in-process path does, runs the job's SFT and GRPO steps as one data-parallel
replica (`trainer.PolicyTrainer` takes this rank's shard of each step's whole groups and sums gradients
over the ranks), and on rank 0 saves the checkpoint and writes the result file. Before each optimizer step
rank 0 reads the parent's word (`JOB/steer`) and broadcasts it: every rank holds, or stops, before the same
step; on stop all ranks save the phase's midway state together (`midway.py`). It never touches the
store. It exits when the appliance process that launched it disappears.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from torch.distributed.elastic.multiprocessing.errors import record


def watch_parent(pid: int, interval_s: float = 1.0) -> None:
    """Exit this process when `pid` (the appliance process) is gone: no worker outlives its phase."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(3)
            except PermissionError:
                pass

    threading.Thread(target=loop, name="watch-parent", daemon=True).start()


def agreed(word: str, device: Any) -> str:
    """Rank 0's word on every rank (a collective: every rank calls it at the same safe point)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return word
    code = torch.tensor([WORDS.index(word)], device=device)
    dist.broadcast(code, src=0)
    return WORDS[int(code.item())]


WORDS = ("go", "hold", "stop")


def steered(job: dict[str, Any], main: bool, device: Any) -> Callable[[int, int], None]:
    """The workers' safe point: rank 0 tells the steps done and reads the parent's word; all ranks obey it.
    While held, the ranks agree again every poll (a collective a second, far inside any timeout)."""
    from appliance.training.learn import Steer, StepWord
    from appliance.training.multiprocess import _write

    steer, progress = Path(job["steer"]), Path(job["progress"])

    def told(done: int, total: int) -> None:
        if main:
            _write(progress, f"{done} {total}")

    def word() -> StepWord:
        said = "go"
        if main:
            try:
                said = steer.read_text().strip() or "go"
            except FileNotFoundError:
                pass
        return cast("StepWord", agreed(said if said in WORDS else "go", device))

    return Steer(word, told).safe_point


def run_job(job: dict[str, Any]) -> dict[str, Any] | None:
    """Train the job as this rank; rank 0 returns the result (steps, kind, timings), others None."""
    import torch
    from accelerate import PartialState

    from appliance.errors import Interrupted
    from appliance.training.learn import run_steps
    from appliance.training.midway import Midway, publish, save_frozen, save_rest, saving_dir
    from appliance.training.trainer import PolicyTrainer

    state = PartialState(cpu=not torch.cuda.is_available())
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    resume_from = Path(job["resume_from"]) if job["resume_from"] else None
    trainer = PolicyTrainer(job["training"], Path(job["base_model"]), resume_from=resume_from,
                            resume_kind=job["resume_kind"], device=state.device)
    timings["load_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    steps: list[dict[str, float]] = []
    folder = Path(job["midway"])

    def keep(work: Midway) -> None:  # every rank its frozen share, then rank 0 the rest, then into place
        into = saving_dir(folder)
        if state.is_main_process:
            shutil.rmtree(into, ignore_errors=True)
        state.wait_for_everyone()
        save_frozen(trainer, into)
        state.wait_for_everyone()
        if state.is_main_process:
            save_rest(trainer, work, into)
            publish(into, folder)

    work = job["work"]
    try:
        safe_point = steered(job, state.is_main_process, state.device)
        run_steps(trainer, work.sft_samples, work.parts, steps.append, safe_point, work=work,
                  resumed_from=folder if job["resumed"] else None, keep=keep)
    except Interrupted:
        timings["train_s"] = time.perf_counter() - t0
        return {"steps": steps, "kind": "", "timings": timings, "interrupted": True} if state.is_main_process else None
    timings["train_s"] = time.perf_counter() - t0
    result = None
    if state.is_main_process:
        t0 = time.perf_counter()
        kind = trainer.save(Path(job["save_to"]))
        timings["save_s"] = time.perf_counter() - t0
        result = {"steps": steps, "kind": kind, "timings": timings}
    state.wait_for_everyone()
    return result


@record  # a failing rank's traceback goes into torchrun's summary, the end of the log the parent quotes
def main(argv: list[str] | None = None) -> None:
    from appliance.training.multiprocess import read_job

    argv = sys.argv[1:] if argv is None else argv
    job = read_job(Path(argv[0]))
    watch_parent(job["parent_pid"])
    result = run_job(job)
    if result is not None:
        tmp = Path(job["result"]).with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(job["result"])
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
