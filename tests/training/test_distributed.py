"""The gradient sum of a multi-process step over a real process group (gloo, two CPU processes): a bf16
policy and an fp32 value head in one call, as `PolicyTrainer.grpo_step` makes it."""

from __future__ import annotations

from pathlib import Path


def _sum_mixed_dtypes(rank: int, init_file: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from appliance.training.distributed import all_reduce_grads

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        policy = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
        head = torch.nn.Parameter(torch.zeros(2, dtype=torch.float32))
        idle = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))  # no gradient on rank 1
        policy.grad = torch.full((3,), rank + 1.0, dtype=torch.bfloat16)
        head.grad = torch.full((2,), 10.0 * (rank + 1), dtype=torch.float32)
        if rank == 0:
            idle.grad = torch.ones(2, dtype=torch.bfloat16)
        # a bucket of 4 elements: the policy's 3 and the idle 2 cannot share one, so several buckets
        all_reduce_grads([policy, head, idle], bucket_numel=4)
        torch.save({"policy": policy.grad, "head": head.grad, "idle": idle.grad}, Path(out_dir) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_a_bf16_policy_and_an_fp32_head_sum_over_two_ranks_in_their_own_dtypes(tmp_path):
    import torch
    import torch.multiprocessing as mp

    mp.spawn(_sum_mixed_dtypes, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert got["policy"].dtype == torch.bfloat16 and got["idle"].dtype == torch.bfloat16
        assert got["head"].dtype == torch.float32
        assert got["policy"].tolist() == [3.0, 3.0, 3.0]
        assert got["head"].tolist() == [30.0, 30.0]
        assert got["idle"].tolist() == [1.0, 1.0]
