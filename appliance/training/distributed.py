"""The data-parallel pieces of a multi-process GRPO step: whole-group shards, the gradient sum, the metric sums.

Every worker of a LEARN phase (training.processes > 1, see `multiprocess.py`) holds the same model and the
same step's samples. Each takes its shard of the step's *whole groups* (`shard_groups`), runs forward and
backward on it with the loss normalised by the denominators of the *whole step* (`loss.Normaliser`: the
grpo/gspo sequence count, the dapo token count, dr_grpo's sequences x max_len), and the gradients are then
summed over the workers (`all_reduce_grads`), so the summed gradient is exactly the single-process one: a
sum of per-sample terms over one shared denominator. DDP would *average* (divide by the world size) and
expects the same number of backward passes on every rank; our shards are uneven (whole groups, several
micro-batches or none), so the sum is one explicit all-reduce per step over the process group DDP would use
(gloo on the CPU, NCCL on GPUs), after the last micro-batch, as DDP's `no_sync` accumulation would do.
After the sum every worker clips and steps the same gradient, so the replicas stay identical.

`shard_groups` is pure; the rest runs inside an initialised torch.distributed process group.
"""

from __future__ import annotations

from typing import Any

from appliance.schemas import Sample


def shard_groups(samples: list[Sample], rank: int, world: int, *, max_len: int) -> list[Sample]:
    """This rank's samples: whole groups, dealt greedily to the rank with the fewest tokens so far.

    Deterministic (every rank computes the same deal from the same list). A group never spans two ranks,
    so its samples (and a rollout's branches) are always trained side by side; a rank may get no group.
    """
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group_id or f"rollout:{s.rollout_id}", []).append(s)
    load = [0] * world
    mine: list[Sample] = []
    for members in groups.values():
        target = min(range(world), key=lambda r: (load[r], r))
        load[target] += sum(min(len(s.token_ids), max_len) for s in members)
        if target == rank:
            mine += members
    return mine


def all_reduce_grads(params: list[Any], bucket_numel: int = 1 << 25) -> None:
    """Sum the gradients of `params` over all ranks, in place (a rank without a gradient adds zeros).

    Gradients travel flattened in buckets of at most `bucket_numel` elements (one collective for a LoRA
    adapter; a few for a full fine-tune), like DDP's buckets. A bucket holds one dtype on one device, as
    DDP's do: the policy's bf16 weights and the value head's fp32 ones in one `torch.cat` would be promoted
    to fp32, and an fp32 gradient cannot be assigned to a bf16 parameter. Every rank holds the same
    parameters in the same order, so every rank forms the same buckets in the same order.
    """
    import torch
    import torch.distributed as dist

    by_kind: dict[tuple[Any, Any], list[Any]] = {}
    for p in params:
        by_kind.setdefault((p.dtype, p.device), []).append(p)
    for same in by_kind.values():
        bucket: list[Any] = []
        size = 0
        for p in same:
            if bucket and size + p.numel() > bucket_numel:
                _reduce_bucket(bucket, torch, dist)
                bucket, size = [], 0
            bucket.append(p)
            size += p.numel()
        if bucket:
            _reduce_bucket(bucket, torch, dist)


def _reduce_bucket(bucket: list[Any], torch: Any, dist: Any) -> None:
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in bucket:
        n = p.numel()
        p.grad = flat[offset: offset + n].view_as(p).clone()
        offset += n


def broadcast_params(params: list[Any]) -> None:
    """Rank 0's values for `params` on every rank (as DDP does at construction): one starting point."""
    import torch.distributed as dist

    for p in params:
        dist.broadcast(p.data, src=0)


def gather_partials(partial: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's partial step statistics (small dicts of sums, counts, minima and maxima)."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, partial)
    return out


def world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
