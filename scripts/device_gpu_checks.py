"""The checks of scripts/device_check that only a GPU can answer, each in a process of its own (fresh CUDA
memory, a crash stays that check's):

    python scripts/device_gpu_checks.py lifecycle|oom|nccl|kernels [--device cuda|cpu]

Prints one JSON object, {"status": "PASS"|"WARN"|"FAIL", "text": ..., figures...}. `--device cpu` rehearses
a check's code with tiny shapes (tests/test_device_check.py): its memory figures then mean nothing.

  lifecycle  the real LEARN phase (appliance.training.learn, the real PolicyTrainer, the gpu profile's LoRA
             in bf16 with gradient checkpointing) on a ~0.5B random llama, against an engine stand-in that
             reads this process's GPU memory at the moment the engine would wake into it: what the trainer
             left behind, and what is left once the phase has returned.
  oom        the same phase with a real CUDA out-of-memory raised inside its training step (after the
             forward pass, its activations alive): the phase must report it (the error reaches the caller),
             bring serving back, and have freed the trainer's memory before the engine wakes. An exception's
             traceback holds every frame of the step, so the trainer and its activations stay alive as long
             as the exception does unless the phase drops them first (issue 46).
  nccl       a one-rank NCCL process group: appliance.training.distributed.all_reduce_grads over a bf16
             policy's and an fp32 value head's gradients (the PPO / turn-credit step of a multi-GPU run);
             every gradient keeps its parameter's dtype and its value, and an optimizer step follows.
  kernels    TRL's Triton kernels (selective_log_softmax, entropy_from_logits: what the loss calls on a GPU)
             against TRL's own torch fallback and a float64 reference: values, gradients and time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import tempfile
import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

GPU_SHAPE = {"hidden": 1280, "intermediate": 3456, "layers": 24, "kv_heads": 4, "vocab": 49152}  # ~0.5B llama
CPU_SHAPE = {"hidden": 128, "intermediate": 256, "layers": 2, "kv_heads": 1, "vocab": 512}
MiB = 2**20


def memory(device: str) -> dict[str, float]:
    """This process's GPU memory in MiB: allocated (live tensors) and reserved (torch's cache: not free for
    another process, such as the engine, until emptied)."""
    import torch

    if not device.startswith("cuda"):
        return {"allocated_mib": 0.0, "reserved_mib": 0.0}
    torch.cuda.synchronize()
    return {"allocated_mib": round(torch.cuda.memory_allocated() / MiB, 1),
            "reserved_mib": round(torch.cuda.memory_reserved() / MiB, 1)}


def model_folder(dest: Path, shape: dict, device: str) -> int:
    """A random llama of `shape` (bf16) with a word-level tokenizer, saved as a Hugging Face folder; its bytes."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from device_train_check import build_model

    model, _ = build_model("full", SimpleNamespace(device=device, gradient_checkpointing=False, seq_len=4096,
                                                   **shape))
    model.save_pretrained(dest, safe_serialization=True)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    torch.cuda.empty_cache() if device.startswith("cuda") else None
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(shape["vocab"])}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="t0", eos_token="t1").save_pretrained(dest)
    return size


def practice(groups: int, per_group: int, seq_len: int, vocab: int) -> tuple[list, list]:
    """Finished rollouts in groups with mixed rewards and their samples: a prompt, then two sampled turns."""
    import random

    from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample

    rng = random.Random(0)
    prompt, turn = seq_len // 4, seq_len * 3 // 8
    mask = [0] * prompt + [1] * turn + [0] * (seq_len - prompt - 2 * turn) + [1] * turn
    rollouts, samples = [], []
    for g in range(groups):
        for i in range(per_group):
            rid, reward = f"g{g}-{i}", float(i % 2)
            rollouts.append(Rollout(rid, "device-check", "t", f"g{g}", 0, "builtin", 0, RolloutStatus.FINISHED,
                                    outcome=Outcome.SUCCESS if reward else Outcome.FAILURE, reward=reward))
            samples.append(Sample(rid, f"g{g}", 0, [rng.randrange(2, vocab) for _ in mask], list(mask),
                                  [-2.0 * m for m in mask], 0))
    return rollouts, samples


def learn_phase(args: argparse.Namespace, *, explode: bool) -> dict[str, Any]:
    """One LEARN phase of the real code on a random model; memory when the engine would wake and after."""
    import torch

    import appliance.training.trainer as trainer_module
    from appliance.config import load_settings
    from appliance.store import Store
    from appliance.testing import FakeEngine
    from appliance.training.learn import learn

    cuda = args.device.startswith("cuda")
    shape = GPU_SHAPE if cuda else CPU_SHAPE
    seq_len = 1024 if cuda else 64
    home = Path(tempfile.mkdtemp(prefix="device-check-learn-"))
    weights = model_folder(home / "model", shape, args.device)
    settings = load_settings(environ={
        "APPLIANCE_HOME": str(home), "APPLIANCE_PROFILE": "gpu", "APPLIANCE_ENGINE__MODEL": str(home / "model"),
        "APPLIANCE_TRAINING__METHOD": "grpo", "APPLIANCE_TRAINING__PROCESSES": "1",
        "APPLIANCE_TRAINING__FULL_FINETUNE": "false", "APPLIANCE_TRAINING__MICRO_BATCH_SIZE": "4",
        "APPLIANCE_TRAINING__MAX_SEQ_LEN": str(seq_len),
        **({} if cuda else {"APPLIANCE_TRAINING__DTYPE": "float32", "APPLIANCE_TRAINING__GRADIENT_CHECKPOINTING":
                            "false"})})
    store = Store(settings.db_path)
    baseline = memory(args.device)

    trainers: list[weakref.ref] = []  # the phase's PolicyTrainer: still alive when the engine wakes?

    class Tracked(trainer_module.PolicyTrainer):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            trainers.append(weakref.ref(self))

    class Engine(FakeEngine):  # the real engine's order; reads the memory the engine would wake into
        at_wake: dict[str, float] | None = None
        trainer_alive = False

        def load_weights(self, path: Path, kind: str) -> int:
            self._woken()
            return super().load_weights(path, kind)

        def resume(self) -> None:
            self._woken()
            super().resume()

        def _woken(self) -> None:
            self.at_wake = memory(args.device)
            self.trainer_alive = any(t() is not None for t in trainers)

    engine = Engine()
    fired: list[float] = []
    real = trainer_module.token_logps

    def exploding(*a: Any, **kw: Any) -> Any:
        out = real(*a, **kw)
        if torch.is_grad_enabled() and not fired:  # inside the step, with its activations alive in `out`
            fired.append(time.monotonic())
            if cuda:
                torch.empty(torch.cuda.get_device_properties(0).total_memory * 2, dtype=torch.uint8,
                            device=args.device)
            raise torch.OutOfMemoryError("CUDA out of memory (the rehearsal's stand-in)")
        return out

    trainer_module.PolicyTrainer = Tracked  # learn() imports it from the module when the phase starts
    if explode:
        trainer_module.token_logps = exploding
    rollouts, samples = practice(4, 4, seq_len, shape["vocab"])
    raised: str | None = None
    t0 = time.monotonic()
    try:
        result = learn(store, settings, engine, rollouts, samples, run_id="device-check", iteration=0, steps=1)
        steps = len(result.steps)
    except Exception as e:
        raised = f"{type(e).__name__}: {str(e)[:300]}"
        steps = 0
    finally:
        trainer_module.token_logps, trainer_module.PolicyTrainer = real, Tracked.__mro__[1]
    seconds = time.monotonic() - t0
    gc.collect()
    after = memory(args.device)
    store.close()
    return {"model_mib": round(weights / MiB, 1), "baseline": baseline, "at_wake": engine.at_wake, "after": after,
            "engine_calls": engine.calls, "raised": raised, "steps": steps, "seconds": round(seconds, 2),
            "oom_fired": bool(fired), "trainer_alive_at_wake": engine.trainer_alive}


def held(figures: dict[str, Any], key: str) -> float:
    """MiB above the baseline at `key` (reserved: what the engine in another process cannot have)."""
    at = figures.get(key) or {"reserved_mib": 0.0}
    return max(0.0, at["reserved_mib"] - figures["baseline"]["reserved_mib"])


def check_lifecycle(args: argparse.Namespace) -> dict[str, Any]:
    f = learn_phase(args, explode=False)
    wake, after, model = held(f, "at_wake"), held(f, "after"), f["model_mib"]
    text = (f"LEARN phase (LoRA, {model:.0f} MiB of weights) in {f['seconds']} s, engine calls {f['engine_calls']}; "
            f"held when the engine wakes {wake:.0f} MiB, after the phase {after:.0f} MiB")
    if f["raised"] or f["engine_calls"] != ["pause", "sync"]:
        return {**f, "status": "FAIL", "text": f"{text}; raised {f['raised']}"}
    if f["trainer_alive_at_wake"]:
        text += "; the PolicyTrainer was still alive when the engine woke"
    # more than half the weights still held: the trainer (or its model) was not freed before the wake
    status = "FAIL" if wake > model / 2 or f["trainer_alive_at_wake"] else "WARN" if wake > 256 else "PASS"
    return {**f, "status": status, "text": text}


def check_oom(args: argparse.Namespace) -> dict[str, Any]:
    f = learn_phase(args, explode=True)
    wake, after, model = held(f, "at_wake"), held(f, "after"), f["model_mib"]
    text = (f"an out-of-memory inside the step: raised {f['raised']}; engine calls {f['engine_calls']}; held when "
            f"the engine wakes {wake:.0f} MiB (weights {model:.0f} MiB), once the error is dropped {after:.0f} MiB")
    if not f["oom_fired"] or not f["raised"] or "OutOfMemory" not in f["raised"]:
        return {**f, "status": "FAIL", "text": f"{text}; the out-of-memory error did not reach the caller"}
    if f["engine_calls"] != ["pause", "resume"]:
        return {**f, "status": "FAIL", "text": f"{text}; serving was not brought back"}
    if f["trainer_alive_at_wake"]:
        text += "; the PolicyTrainer was still alive when the engine woke (the traceback held the step's frames)"
    status = ("FAIL" if wake > model / 2 or after > model / 2 or f["trainer_alive_at_wake"]
              else "WARN" if wake > 256 else "PASS")
    return {**f, "status": status, "text": text}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_nccl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from appliance.training.distributed import all_reduce_grads

    cuda = args.device.startswith("cuda")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1,
                            **({"device_id": torch.device("cuda", 0)} if cuda else {}))
    try:
        torch.manual_seed(0)
        policy = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512)).to(args.device,
                                                                                           torch.bfloat16)
        head = torch.nn.Linear(512, 1).to(args.device, torch.float32)  # the value head: fp32 beside bf16
        x = torch.randn(8, 512, device=args.device, dtype=torch.bfloat16)
        hidden = policy(x)
        (hidden.float().pow(2).mean() + head(hidden.detach().float()).pow(2).mean()).backward()
        params = list(policy.parameters()) + list(head.parameters())
        before = [p.grad.clone() for p in params]
        t0 = time.perf_counter()
        all_reduce_grads(params)
        torch.cuda.synchronize() if cuda else None
        seconds = time.perf_counter() - t0
        dtypes = sorted({str(p.grad.dtype) for p in params})
        wrong = [i for i, p in enumerate(params) if p.grad.dtype != p.dtype]
        differ = max(float((p.grad.float() - b.float()).abs().max()) for p, b in zip(params, before))
        torch.optim.AdamW(params, lr=1e-3).step()  # what follows the reduce in a step
    finally:
        dist.destroy_process_group()
    text = (f"{backend}, 1 rank: {len(params)} gradients ({', '.join(dtypes)}) reduced in {seconds * 1e3:.1f} ms; "
            f"largest change {differ:.3g} (one rank: none expected)")
    if wrong:
        return {"status": "FAIL", "text": f"{text}; gradients {wrong} lost their parameter's dtype"}
    return {"status": "PASS" if differ == 0.0 else "FAIL", "text": text, "seconds": seconds, "dtypes": dtypes}


def check_kernels(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import trl.trainer.utils as tu

    cuda = args.device.startswith("cuda")
    rows, length, vocab = (2, 1024, 151936) if cuda else (2, 16, 512)  # Qwen2.5's vocabulary on the GPU
    g = torch.Generator(device=args.device).manual_seed(0)
    logits = torch.randn(rows, length, vocab, device=args.device, generator=g) * 4
    index = torch.randint(0, vocab, (rows, length), device=args.device, generator=g)
    ref_logp = torch.log_softmax(logits.double(), -1)
    ref = ref_logp.gather(-1, index[..., None]).squeeze(-1)
    ref_entropy = -(ref_logp.exp() * ref_logp).sum(-1)
    # d/dlogits of sum(selected logp) = onehot - softmax, exactly
    ref_grad = torch.nn.functional.one_hot(index, vocab).double() - ref_logp.exp()
    del ref_logp

    def run(path: str) -> dict[str, Any]:
        saved = tu.is_triton_available
        if path == "torch":
            tu.is_triton_available = lambda: False  # TRL's own fallback: log_softmax and gather in chunks
        try:
            x = logits.clone().requires_grad_()
            torch.cuda.synchronize() if cuda else None
            t0 = time.perf_counter()
            logp = tu.selective_log_softmax(x, index)
            logp.sum().backward()
            with torch.no_grad():
                entropy = tu.entropy_from_logits(x.detach())
            torch.cuda.synchronize() if cuda else None
            seconds = time.perf_counter() - t0
        finally:
            tu.is_triton_available = saved
        return {"seconds": round(seconds, 4),
                "logp_err": float((logp.double() - ref).abs().max()),
                "entropy_err": float((entropy.double() - ref_entropy).abs().max()),
                "grad_err": float((x.grad.double() - ref_grad).abs().max())}

    kernel_taken = bool(tu.is_triton_available() and tu._supports_trl_loss_kernel(logits, index))
    run("kernel")  # warm-up: Triton compiles on the first call
    kernel, fallback = run("kernel"), run("torch")
    worst = max(kernel["logp_err"], kernel["entropy_err"], kernel["grad_err"] * 100)
    text = (f"{rows}x{length}x{vocab} fp32 logits: {'Triton kernel' if kernel_taken else 'torch path (no Triton)'} "
            f"{kernel['seconds'] * 1e3:.1f} ms vs TRL's torch fallback {fallback['seconds'] * 1e3:.1f} ms; "
            f"max error vs float64: logp {kernel['logp_err']:.2e} (fallback {fallback['logp_err']:.2e}), entropy "
            f"{kernel['entropy_err']:.2e} ({fallback['entropy_err']:.2e}), grad {kernel['grad_err']:.2e} "
            f"({fallback['grad_err']:.2e})")
    status = "FAIL" if worst > 1e-3 else "WARN" if cuda and not kernel_taken else "PASS"
    return {"status": status, "text": text, "kernel": kernel, "fallback": fallback, "kernel_taken": kernel_taken,
            "shape": [rows, length, vocab]}


CHECKS = {"lifecycle": check_lifecycle, "oom": check_oom, "nccl": check_nccl, "kernels": check_kernels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=sorted(CHECKS))
    ap.add_argument("--device", default="cuda", help="cpu: rehearse the check's code with tiny shapes")
    args = ap.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: these checks are for a GPU machine (--device cpu rehearses them)")
    print(json.dumps(CHECKS[args.check](args), indent=2))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
