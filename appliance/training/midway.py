"""A LEARN phase stopped between two optimizer steps, saved so that the next start finishes it.

`appliance stop --now` (and SIGTERM) stop a training phase at its next safe point: before an optimizer step,
SFT's or GRPO's, in this process or in the workers. What the phase trained is then kept in one folder,
`checkpoints_dir/midway-<run>-it<iteration>/`, and the next LEARN phase of that iteration goes on from it:

    adapter or weights, trainer/optimizer.pt (+ value head)   `PolicyTrainer.save`, what a resume loads
    midway.json     the phase's inputs (SFT samples, GRPO parts with their credit), steps done of each,
                    the metrics of the steps done and the global step reached
    sft.pt          the SFT's own AdamW and learning-rate schedule, while SFT is part-way
    frozen-rank<r>-of<w>.pt   each replica's frozen pi_old (and V_old, returns) and random state

pi_old is saved, not recomputed: the policy that sampled the rollouts is the one before the phase's first
update, and recomputing it would need the phase's starting weights loaded a second time. The inputs are
saved too, so the phase finishes on exactly what it started on (the demonstrations are drawn afresh at each
start). A continued phase repeats no step: its metrics rows go on from the global step reached. The folder
is written beside its final place and renamed into it, so a crash while saving leaves the previous one
whole; the phase's finished checkpoint (`v<N>`) replaces it. A stop before the first step saves nothing.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.schemas import Sample
from appliance.training.advantages import GroupedBatch
from appliance.training.sft import SftState

if TYPE_CHECKING:
    from appliance.training.trainer import PolicyTrainer

STATE_FILE = "midway.json"
SFT_FILE = "sft.pt"


@dataclass
class Midway:
    """The phase's work and how far it got; `run_steps` advances it step by step."""

    run_id: str | None
    iteration: int | None
    sft_samples: list[Sample]
    parts: list[GroupedBatch]
    sft_steps: int = 0  # SFT's planned optimizer steps (`sft.sft_plan`)
    sft: SftState = field(default_factory=SftState)
    sft_finished: bool = False
    parts_done: int = 0
    frozen: bool = False  # pi_old was recorded (and the parts carry their credit)
    steps: list[dict[str, float]] = field(default_factory=list)  # metrics of every step recorded so far
    global_step: int = 0
    kind: str = ""

    @property
    def total(self) -> int:
        return self.sft_steps + len(self.parts)

    @property
    def done(self) -> int:
        return (self.sft_steps if self.sft_finished else self.sft.done) + self.parts_done

    def as_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "iteration": self.iteration,
                "sft_samples": [asdict(s) for s in self.sft_samples], "parts": [asdict(p) for p in self.parts],
                "sft_steps": self.sft_steps, "sft_done": self.sft.done, "sft_losses": self.sft.losses,
                "sft_tokens": self.sft.tokens, "sft_finished": self.sft_finished, "parts_done": self.parts_done,
                "frozen": self.frozen, "steps": self.steps, "global_step": self.global_step, "kind": self.kind}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Midway:
        return cls(d["run_id"], d["iteration"], [Sample(**s) for s in d["sft_samples"]],
                   [GroupedBatch(**{**p, "samples": [Sample(**s) for s in p["samples"]]}) for p in d["parts"]],
                   d["sft_steps"], SftState(d["sft_done"], list(d["sft_losses"]), d["sft_tokens"]),
                   d["sft_finished"], d["parts_done"], d["frozen"], list(d["steps"]), d["global_step"], d["kind"])


def midway_dir(checkpoints_dir: Path, run_id: str | None, iteration: int | None) -> Path:
    return checkpoints_dir / f"midway-{run_id}-it{iteration}"


def saving_dir(folder: Path) -> Path:
    """Where a midway state is written before it is renamed into `folder`."""
    return folder.with_name(folder.name + ".saving")


def frozen_file(folder: Path, rank: int, world: int) -> Path:
    return folder / f"frozen-rank{rank}-of{world}.pt"


def save_frozen(trainer: PolicyTrainer, into: Path) -> None:
    """This replica's share of the phase's frozen state (pi_old, V_old, the returns) and its random state."""
    import torch

    into.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"old_logps": trainer.old_logps, "old_values": trainer.old_values,
                             "returns": trainer.returns, "depth": trainer.depth, "rng": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    torch.save(state, frozen_file(into, trainer.rank, trainer.world))


def save_rest(trainer: PolicyTrainer, work: Midway, into: Path) -> None:
    """What one replica (rank 0, or the only one) writes besides its frozen state: weights, optimizer, state."""
    import torch

    work.kind = trainer.save(into)
    if work.sft.optimizer is not None and not work.sft_finished:
        torch.save({"optimizer": work.sft.optimizer, "schedule": work.sft.schedule}, into / SFT_FILE)
    (into / STATE_FILE).write_text(json.dumps(work.as_json()))


def publish(into: Path, folder: Path) -> None:
    """Replace `folder` with the state just written to `into` (its `saving_dir`)."""
    shutil.rmtree(folder, ignore_errors=True)
    into.rename(folder)


def save_midway(trainer: PolicyTrainer, work: Midway, folder: Path) -> None:
    """Save the phase stopped between steps (one process): its frozen state, weights and progress."""
    into = saving_dir(folder)
    shutil.rmtree(into, ignore_errors=True)
    save_frozen(trainer, into)
    save_rest(trainer, work, into)
    publish(into, folder)


def load_midway(folder: Path, run_id: str | None, iteration: int | None) -> Midway | None:
    """The phase's saved state in `folder`, or None when there is none (or it is another phase's)."""
    path = folder / STATE_FILE
    if not path.exists():
        return None
    work = Midway.from_json(json.loads(path.read_text()))
    if (work.run_id, work.iteration) != (run_id, iteration):
        return None
    if (folder / SFT_FILE).exists():
        import torch

        saved = torch.load(folder / SFT_FILE, map_location="cpu", weights_only=False)
        work.sft.optimizer, work.sft.schedule = saved["optimizer"], saved["schedule"]
    return work


def restore_frozen(trainer: PolicyTrainer, folder: Path) -> None:
    """Put this replica's frozen state back (a midway saved by as many replicas as now train)."""
    import torch

    path = frozen_file(folder, trainer.rank, trainer.world)
    if not path.exists():
        from appliance.errors import TrainingError

        raise TrainingError(f"the training phase stopped midway was saved by another number of trainer processes "
                            f"({path.name} is missing in {folder})",
                            f"set training.processes back to what it was, or delete {folder} to redo the phase")
    # on the CPU: the random states must stay CPU byte tensors (pi_old and the values are plain floats)
    state = torch.load(path, map_location="cpu", weights_only=False)
    trainer.old_logps, trainer.old_values = state["old_logps"], state["old_values"]
    trainer.returns, trainer.depth = state["returns"], state["depth"]
    torch.set_rng_state(state["rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])


def drop_midway(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(saving_dir(folder), ignore_errors=True)
