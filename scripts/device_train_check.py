"""One GRPO step on a GPU: tokens/s and model FLOP utilisation of the trainer, for a ~0.5B random llama.

    python scripts/device_train_check.py [--mode full|lora|both|plain|all] [--seqs 32] [--seq-len 1024]
                                         [--micro 8] [--processes N] [--gradient-checkpointing] [--value-head]

`plain` is the yardstick: plain transformers forward + backward (`model(..., labels=...).loss`, the causal
LM loss on the trained tokens) and AdamW on the same model, shapes and micro-batches, full fine-tune; `all`
runs full, lora and plain. `--gradient-checkpointing` and `--value-head` (a float32 Linear(hidden, 1) on the
detached final hidden states with its own AdamW, as appliance/training/critic.py) take the gpu profile's
training shape for its peak memory (scripts/device_check prints it beside `appliance plan`'s estimate).

Standalone: needs torch, transformers, peft and TRL only (no vLLM, no store, no model download; the model
is random-initialised from a config, the tokens are random). It runs the appliance's own loss code
(appliance/training/loss.py, imported from this checkout) in the same step shape as
`PolicyTrainer.grpo_step`: micro-batched forward with grad, detached old logprobs, the engine importance
ratio against recorded logprobs (token_truncate), the DAPO loss, backward, clip, AdamW. One warm-up step,
then `--steps` timed steps. Prints one JSON object. Budget: well under 5 minutes on one H200.

Several GPUs (`--processes`, default one per visible GPU): the script relaunches itself through
`accelerate launch` (as `training.processes` does, see appliance/training/multiprocess.py), one process per
GPU over NCCL. The step's `--seqs` sequences are dealt over the processes by micro-batch, the loss keeps
the whole step's normaliser, and the gradients are summed with the appliance's own all-reduce
(appliance/training/distributed.py) before the identical optimizer steps; rank 0 prints the JSON. On one
GPU (or `--processes 1`) nothing is relaunched. `--device cpu --processes 2` smoke-tests that path (gloo).

MFU = achieved model FLOP/s / peak bf16 dense FLOP/s (`--peak-tflops`, default 989 for H100/H200 SXM),
over all processes: tokens of the whole step x FLOPs per token / step time / (peak x processes).
Model FLOPs per token (PaLM appendix B, causal attention counted in full): forward 2N + 2*n_layer*s*d_attn;
backward twice the forward for a full fine-tune; for LoRA the frozen weights need no weight gradient, so
backward is ~1x the forward matmuls (activation gradients) plus the tiny adapter terms. N excludes the
input embedding (a lookup, no FLOPs) but includes the (tied) output projection.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = {"both": ["full", "lora"], "all": ["full", "lora", "plain"]}


def build_model(mode: str, args: argparse.Namespace):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64, num_key_value_heads=args.kv_heads, head_dim=64,
        max_position_embeddings=max(4096, args.seq_len), tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(args.device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=16, lora_alpha=32, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        if args.gradient_checkpointing:
            model.enable_input_require_grads()  # as PolicyTrainer: frozen embeddings give no grad to checkpoint
    return model, config


def flops_per_token(config, n_matmul: int, seq_len: int, mode: str) -> float:
    attn = 2 * config.num_hidden_layers * seq_len * config.hidden_size  # QK^T and AV, forward, per token
    forward = 2 * n_matmul + attn
    return forward * (3 if mode == "full" else 2)


def run(mode: str, args: argparse.Namespace) -> dict:
    import torch

    from appliance.training.distributed import all_reduce_grads, broadcast_params
    from appliance.training.loss import Normaliser, engine_is_ratio, pack, policy_loss, token_logps

    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model, config = build_model(mode, args)
    base = model.get_base_model() if mode == "lora" else model
    n_total = sum(p.numel() for p in base.parameters())
    # tied embeddings: the one matrix costs FLOPs once, as the output projection; norms cost none
    n_matmul = n_total - sum(p.numel() for n, p in base.named_parameters() if "norm" in n)
    params = [p for p in model.parameters() if p.requires_grad]
    if args.world > 1:
        broadcast_params(params)
    opt = torch.optim.AdamW(params, lr=1e-5)
    head = torch.nn.Linear(config.hidden_size, 1).to(args.device, torch.float32) if args.value_head else None
    head_opt = torch.optim.AdamW(head.parameters(), lr=1e-3) if head is not None else None
    cfg = SimpleNamespace(loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0, is_mode="token_truncate",
                          is_cap=3.0, is_min=None)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, args.vocab - 100, (args.seqs, args.seq_len), generator=g).tolist()
    prompt = args.seq_len // 4
    # a multi-turn mask: prompt, then alternating sampled / tool spans
    span = max(1, (args.seq_len - prompt) // 6)
    mask_row = [0] * prompt + ([1] * span + [0] * span) * 3
    mask_row = (mask_row + [1] * args.seq_len)[: args.seq_len]
    masks = [mask_row] * args.seqs
    logprobs = [[-2.0 * m for m in mask_row]] * args.seqs
    adv = torch.randn(args.seqs, generator=g).tolist()
    every = [pack(ids[i: i + args.micro], masks[i: i + args.micro], logprobs[i: i + args.micro],
                  adv[i: i + args.micro], pad_id=0, max_len=args.seq_len) for i in range(0, args.seqs, args.micro)]
    norm = Normaliser(args.seqs, sum(b.trained_tokens for b in every), args.seq_len)  # the whole step's
    micro = every[args.rank:: args.world]  # this process's share of the step

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        for b in micro:
            input_ids, attn = b.input_ids.to(args.device), b.attention_mask.to(args.device)
            mask, eng, a = b.mask.to(args.device), b.engine_logps.to(args.device), b.advantages.to(args.device)
            if mode == "plain":
                labels = torch.where(torch.nn.functional.pad(mask, (1, 0)) > 0, input_ids, -100)
                loss = model(input_ids=input_ids, attention_mask=attn, labels=labels).loss
                loss.backward()
                continue
            hidden: list | None = [] if head is not None else None
            logps = token_logps(model, input_ids, attn, hidden=hidden)
            old = logps.detach()
            ratio, _ = engine_is_ratio(old, eng, mask, cfg)
            loss, _ = policy_loss(logps, old, None, ratio, mask, a, cfg, norm)
            loss.backward()
            if head is not None and hidden:
                torch.nn.functional.mse_loss(head(hidden[0].float()).squeeze(-1), a[:, None].expand(
                    -1, hidden[0].shape[1])).backward()
        if args.world > 1:
            all_reduce_grads(params)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if head_opt is not None:
            head_opt.step()
            head_opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    t0 = time.perf_counter()
    first_loss = step()
    sync()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]
    tokens = args.seqs * args.seq_len
    fpt = flops_per_token(config, n_matmul, args.seq_len, "full" if mode == "plain" else mode)
    achieved = tokens * fpt / step_s
    out = {
        "mode": mode, "processes": args.world, "micro_batches_per_process": len(micro), "params": n_total,
        "trainable_params": sum(p.numel() for p in params),
        "tokens_per_step": tokens, "trained_tokens_per_step": norm.tokens, "micro_batch": args.micro,
        "seq_len": args.seq_len, "warmup_s": round(warmup_s, 3), "step_s_median": round(step_s, 4),
        "step_s_all": [round(t, 4) for t in times], "tokens_per_s": round(tokens / step_s, 1),
        "model_tflops_per_s": round(achieved / 1e12, 2),
        "mfu": round(achieved / (args.peak_tflops * 1e12 * args.world), 4),
        "flops_per_token": fpt, "loss_finite": math.isfinite(first_loss),
        "gradient_checkpointing": args.gradient_checkpointing, "value_head": args.value_head,
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
    }
    # free the step's model, optimizer and batches before empty_cache (assigned, not deleted: `step` closes over them)
    model = opt = micro = head = head_opt = None
    if cuda:
        torch.cuda.empty_cache()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["full", "lora", "both", "plain", "all"], default="both")
    p.add_argument("--seqs", type=int, default=32, help="sequences per optimizer step")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--micro", type=int, default=8, help="sequences per forward pass")
    p.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    p.add_argument("--hidden", type=int, default=1280)
    p.add_argument("--intermediate", type=int, default=3456)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--gradient-checkpointing", action="store_true", help="as the gpu profile trains")
    p.add_argument("--value-head", action="store_true", help="add the PPO critic's value head (training.method = ppo)")
    p.add_argument("--device", default="cuda", help="cpu only for a smoke test of this script with tiny sizes")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak of the GPU")
    p.add_argument("--processes", type=int, default=0, help="data-parallel processes; 0 = one per visible GPU")
    args = p.parse_args()

    import torch
    import transformers
    import trl

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: this check is for a GPU machine")
    processes = args.processes or (torch.cuda.device_count() if args.device == "cuda" else 1)
    if processes > 1 and "LOCAL_RANK" not in os.environ:
        if -(-args.seqs // args.micro) < processes:
            sys.exit(f"--seqs {args.seqs} / --micro {args.micro} gives fewer micro-batches than {processes} processes")
        sys.exit(relaunch(processes))
    args.rank, args.world = 0, 1
    if "LOCAL_RANK" in os.environ:  # one of the relaunched processes
        from accelerate import PartialState

        state = PartialState(cpu=args.device == "cpu")
        args.rank, args.world = state.process_index, state.num_processes
        args.device = str(state.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    report = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
        "peak_tflops": args.peak_tflops, "processes": args.world,
        "results": [run(m, args) for m in MODES.get(args.mode, [args.mode])],
    }
    if args.rank == 0:
        print(json.dumps(report, indent=2))
    if args.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


def relaunch(processes: int) -> int:
    """This script again, in `processes` processes through accelerate launch (one per GPU); its exit code."""
    from appliance.training.multiprocess import accelerate_config

    with tempfile.TemporaryDirectory(prefix="device-train-check-") as tmp:
        config = Path(tmp) / "accelerate.json"
        config.write_text(json.dumps(accelerate_config(processes)))
        return subprocess.call([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                                "--num_processes", str(processes), __file__, *sys.argv[1:]])


if __name__ == "__main__":
    main()
