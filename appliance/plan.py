"""Will this model fit on these GPUs, and with which settings: the memory arithmetic of `appliance plan`.

Reads a Hugging Face `config.json` (no weights) and the settings, and works out per GPU what serving and
training hold while each is awake (they take turns: serving sleeps while training runs, DESIGN
"Time-slicing"): the weights, the KV cache per token and the rollouts of `engine.max_model_len` tokens
that fit in it, the optimizer states of a full fine-tune or a LoRA adapter, the logits of the longest
training sample, activations, the PPO value head. From these it recommends `gpu_memory_utilization`, the
sleep level, `tensor_parallel_size` (all GPUs where the model's shapes divide), the micro-batch and the
trainer processes, or refuses with the reason and a fix.

What it does not cover: it is arithmetic over shapes, not a measurement (scripts/device_check measures
the trainer's peak on a GPU and prints it beside this estimate); activations are an estimate for
SDPA/flash attention (no seq x seq matrix); sharded (FSDP) training is not built, so every trainer
process holds the whole model. Units are decimal GB (1e9 bytes), as GPU vendors label their memory.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError

GB = 1e9
# Per GPU, besides weights and KV cache: CUDA context, NCCL buffers, vLLM's activations and CUDA graphs.
SERVING_RESERVE_GB = 2.0
# Per GPU while training: the trainer's CUDA context and allocator slack, plus the sleeping engine's context.
TRAINING_RESERVE_GB = 3.0
# The trainer keeps going below this share of the GPU; above it the allocator's fragmentation bites.
TRAINING_HEADROOM = 0.95
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class PlanError(ApplianceError):
    pass


@dataclass(frozen=True)
class ModelShape:
    """The parts of a decoder-only config.json the arithmetic needs (Llama, Qwen2, Mistral and kin)."""

    name: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool
    dtype: str

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str) -> ModelShape:
        config = config.get("text_config", config)  # multimodal configs nest the language model's
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads") if k not in config]
        if missing:
            raise PlanError(f"{name}: config.json has no {', '.join(missing)}",
                            "appliance plan reads decoder-only configs (Llama, Qwen2, Mistral); point --model "
                            "at the folder that holds the language model's config.json")
        heads = int(config["num_attention_heads"])
        return cls(
            name=name, vocab=int(config["vocab_size"]), hidden=int(config["hidden_size"]),
            intermediate=int(config["intermediate_size"]), layers=int(config["num_hidden_layers"]), heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
            tied=bool(config.get("tie_word_embeddings", False)),
            # Qwen2 has q/k/v biases without saying so in its config; others say attention_bias
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
            dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
        )

    def lora_shapes(self, targets: list[str]) -> list[tuple[int, int]]:
        """(in, out) of each adapted projection of one layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        shapes = {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                  "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                  "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}
        return [shapes[t] for t in targets if t in shapes]

    @property
    def params(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden + (q + 2 * kv if self.qkv_bias else 0)
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * layer + embeddings + self.hidden


def read_model(folder: Path) -> ModelShape:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise PlanError(f"no config.json in {folder}",
                        "pass --model with a Hugging Face model folder (only config.json is read), or set engine.model")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PlanError(f"{path} is not JSON: {e}", "restore the model folder's config.json") from None
    return ModelShape.from_config(config, Path(folder).name)


def tensor_parallel_sizes(shape: ModelShape, gpus: int) -> list[int]:
    """The tensor parallel sizes vLLM accepts for this shape, up to `gpus`: attention heads and the MLP's
    intermediate size split evenly, and KV heads either split evenly or are replicated a whole number of
    times (vLLM refuses anything else at start-up, e.g. Qwen2.5-7B's 28 heads over 8 GPUs)."""
    def ok(tp: int) -> bool:
        kv_ok = shape.kv_heads % tp == 0 if tp <= shape.kv_heads else tp % shape.kv_heads == 0
        return shape.heads % tp == 0 and shape.intermediate % tp == 0 and kv_ok
    return [tp for tp in range(1, gpus + 1) if ok(tp)]


@dataclass
class Plan:
    model: str
    params_b: float
    gpus: int
    gpu_memory_gb: float
    # serving
    weights_gb: float
    kv_per_token_kib: float
    tensor_parallel_size: int
    gpu_memory_utilization: float
    kv_budget_gb: float
    rollout_tokens: int
    rollouts_fit: int
    rollouts_in_flight: int
    sleep_level: int
    # training, per GPU
    method: str
    full_finetune: bool
    trained_params_m: float
    states_gb: float
    other_states_gb: float  # the same for the other choice of training.full_finetune
    logits_per_sample_gb: float
    activations_per_sample_gb: float
    value_head_gb: float
    training_budget_gb: float
    micro_batch_size: int
    training_peak_gb: float
    processes: int
    notes: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def training_memory(shape: ModelShape, settings: Settings) -> dict[str, float]:
    """Bytes a trainer process holds: fixed (weights + optimizer states) and per sample of the micro-batch."""
    t = settings.training
    wb = DTYPE_BYTES[t.dtype]
    if t.full_finetune:
        # weights, gradients and AdamW's two moments, all in the trainer's dtype: torch's AdamW keeps its
        # moments in the parameter's dtype, and the trainer loads the model in training.dtype (no fp32 master)
        trained = shape.params
        states = shape.params * 4 * wb
        if t.beta:
            states += shape.params * wb  # a frozen reference copy (LoRA disables its adapter instead)
    else:
        # the frozen base in training.dtype; the adapter in float32 (peft upcasts it) with gradients and moments
        trained = shape.layers * sum(t.lora_rank * (i + o) for i, o in shape.lora_shapes(t.lora_targets))
        states = shape.params * wb + trained * 16
    tokens = t.max_seq_len
    # logits of the sample in the trainer's dtype plus their float32 log-softmax (DEPLOYMENT "Memory arithmetic")
    logits = tokens * shape.vocab * (wb + 4)
    # activations kept for backward: one hidden state per layer with gradient checkpointing plus one layer's
    # recomputed inside; without it every layer's (~8 hidden-wide and 4 intermediate-wide tensors per token)
    layer_acts = tokens * (8 * shape.hidden + 4 * shape.intermediate) * wb
    acts = (shape.layers * tokens * shape.hidden * wb + layer_acts) if t.gradient_checkpointing \
        else shape.layers * layer_acts
    critic = t.method == "ppo" or t.turn_credit > 0
    # the value head: hidden + 1 float32 parameters with AdamW, and the last hidden state in float32 per sample
    value_fixed = (shape.hidden + 1) * 16 if critic else 0
    value_sample = tokens * shape.hidden * 4 if critic else 0
    return {"trained": trained, "states": states, "logits": logits, "acts": acts,
            "value_fixed": value_fixed, "value_sample": value_sample}


def make_plan(shape: ModelShape, settings: Settings, gpus: int, gpu_memory_gb: float) -> Plan:
    """The plan for `shape` on `gpus` GPUs of `gpu_memory_gb` each, or a PlanError saying why it cannot fit."""
    if gpus < 1:
        raise PlanError(f"a plan needs at least one GPU, got {gpus}",
                        "pass --gpus N (and --gpu-memory GB on a machine without nvidia-smi)")
    notes: list[str] = []
    e, t = settings.engine, settings.training
    serve_bytes = DTYPE_BYTES.get(e.dtype, DTYPE_BYTES.get(shape.dtype, 2))
    weights = shape.params * serve_bytes
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * serve_bytes

    sizes = tensor_parallel_sizes(shape, gpus)
    tp = sizes[-1]
    if tp < gpus:
        notes.append(f"tensor_parallel_size {gpus} does not divide the model ({shape.heads} attention heads, "
                     f"{shape.kv_heads} KV heads, intermediate {shape.intermediate}); the largest that does is {tp}")

    processes = gpus if t.processes == 0 else t.processes
    if processes > gpus:
        raise PlanError(f"training.processes = {t.processes} asks for more trainer processes than the {gpus} GPUs",
                        f"set training.processes = 0 (one per GPU) or at most {gpus}")
    # A trainer in the appliance's own process (1 process) may still hold cached memory when serving wakes,
    # so serving leaves it room; worker processes exit after each LEARN phase and free everything.
    utilization = 0.85 if processes > 1 else 0.45
    if processes == 1:
        notes.append("one trainer process trains inside the appliance's process: gpu_memory_utilization 0.45 leaves "
                     "it room (training.processes = 2+ runs workers that exit after each LEARN phase; then 0.85)")
    kv_budget = tp * (utilization * gpu_memory_gb - SERVING_RESERVE_GB) * GB - weights
    rollout_bytes = e.max_model_len * kv_per_token
    if kv_budget < rollout_bytes:
        raise PlanError(
            f"{shape.name} does not fit for serving: {weights / GB:.1f} GB of weights over {tp} GPU(s) at "
            f"gpu_memory_utilization {utilization} leave {max(kv_budget, 0) / GB:.1f} GB of KV cache, less than "
            f"one {e.max_model_len}-token rollout ({rollout_bytes / GB:.2f} GB)",
            "use more GPUs (--gpus), GPUs with more memory, a smaller engine.max_model_len, or a smaller model")
    rollouts_fit = int(kv_budget // rollout_bytes)
    in_flight = settings.sandbox.max_concurrent
    if rollouts_fit < in_flight:
        notes.append(f"{rollouts_fit} rollouts of {e.max_model_len} tokens fit in the KV cache, fewer than the "
                     f"{in_flight} sandboxes that run at once: vLLM queues and preempts the rest "
                     "(slower, still correct)")
    # Level 2 drops the weights while asleep; with a full fine-tune new weights are loaded on wake anyway.
    # With LoRA the base stays the same, and level 1 keeps it in host RAM for a fast wake.
    sleep_level = 2 if t.full_finetune else 1

    mem = training_memory(shape, settings)
    flipped = settings.model_copy(deep=True)
    flipped.training.full_finetune = not t.full_finetune
    other = training_memory(shape, flipped)
    budget = (TRAINING_HEADROOM * gpu_memory_gb - TRAINING_RESERVE_GB) * GB
    fixed = mem["states"] + mem["value_fixed"]
    per_sample = mem["logits"] + mem["acts"] + mem["value_sample"]
    fit = int((budget - fixed) // per_sample) if budget > fixed else 0
    if fit < 1:
        what = "full fine-tune (weights, gradients, AdamW moments)" if t.full_finetune else \
            "LoRA (frozen base, adapter states)"
        raise PlanError(
            f"{shape.name} does not fit for training: {what} {fixed / GB:.1f} GB + one {t.max_seq_len}-token sample "
            f"{per_sample / GB:.1f} GB > {budget / GB:.1f} GB per GPU (every trainer process holds the whole model; "
            "sharded training is not built)",
            "use LoRA (training.full_finetune = false), a smaller training.max_seq_len, GPUs with more memory, "
            "or a smaller model")
    micro = min(fit, t.micro_batch_size)
    if fit < t.micro_batch_size:
        notes.append(f"training.micro_batch_size {t.micro_batch_size} does not fit; {fit} does")
    if not t.gradient_checkpointing:
        notes.append("training.gradient_checkpointing is off: activations of every layer are kept "
                     "(the gpu profile turns it on)")
    return Plan(
        model=shape.name, params_b=shape.params / 1e9, gpus=gpus, gpu_memory_gb=gpu_memory_gb,
        weights_gb=weights / GB, kv_per_token_kib=kv_per_token / 1024, tensor_parallel_size=tp,
        gpu_memory_utilization=utilization, kv_budget_gb=kv_budget / GB, rollout_tokens=e.max_model_len,
        rollouts_fit=rollouts_fit, rollouts_in_flight=in_flight, sleep_level=sleep_level,
        method=t.method, full_finetune=t.full_finetune, trained_params_m=mem["trained"] / 1e6,
        states_gb=mem["states"] / GB, other_states_gb=other["states"] / GB, logits_per_sample_gb=mem["logits"] / GB,
        activations_per_sample_gb=mem["acts"] / GB, value_head_gb=(mem["value_fixed"] + mem["value_sample"]) / GB,
        training_budget_gb=budget / GB, micro_batch_size=micro,
        training_peak_gb=(fixed + micro * per_sample) / GB, processes=processes, notes=notes,
    )


def render(plan: Plan) -> str:
    """The plan as text: the arithmetic, then the settings to put into appliance.toml."""
    p = plan
    kind = "full fine-tune" if p.full_finetune else "LoRA"
    lines = [
        f"{p.model}: {p.params_b:.2f}B parameters on {p.gpus} GPU(s) of {p.gpu_memory_gb:.0f} GB",
        "serving (training asleep):",
        f"  weights {p.weights_gb:.1f} GB over tensor_parallel_size {p.tensor_parallel_size}; "
        f"KV cache {p.kv_per_token_kib:.0f} KiB per token",
        f"  KV budget {p.kv_budget_gb:.1f} GB at gpu_memory_utilization {p.gpu_memory_utilization}: "
        f"{p.rollouts_fit} rollouts of {p.rollout_tokens} tokens at once "
        f"({p.rollouts_in_flight} sandboxes run at once)",
        f"training ({kind}, {p.method}; serving asleep), per GPU of {p.training_budget_gb:.1f} GB usable:",
        f"  weights + optimizer states {p.states_gb:.1f} GB ({p.trained_params_m:,.1f}M trained parameters); "
        f"{'LoRA' if p.full_finetune else 'a full fine-tune'} would hold {p.other_states_gb:.1f} GB",
        f"  per sample: logits {p.logits_per_sample_gb:.1f} GB + activations {p.activations_per_sample_gb:.1f} GB"
        + (f" + value head {p.value_head_gb:.2f} GB" if p.value_head_gb else ""),
        f"  micro-batch {p.micro_batch_size}: peak {p.training_peak_gb:.1f} GB; {p.processes} trainer process(es)",
        "recommended settings (appliance.toml):",
        "  [engine]",
        f"  tensor_parallel_size = {p.tensor_parallel_size}",
        f"  gpu_memory_utilization = {p.gpu_memory_utilization}",
        "  enable_sleep_mode = true",
        f"  sleep_level = {p.sleep_level}",
        "  [training]",
        f"  micro_batch_size = {p.micro_batch_size}",
        f"  processes = {p.processes}",
    ]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


# What a GPU run takes from the plan where the settings name no value of their own (`fit_to_gpus`): the engine's
# serving shape and sleep level, and the micro-batch that fits; `appliance plan` prints the same.
PLANNED = {"engine": ("tensor_parallel_size", "gpu_memory_utilization", "sleep_level"),
           "training": ("micro_batch_size",)}


def fit_to_gpus(settings: Settings, inventory: tuple[int, float] | None = None) -> tuple[Settings, Plan | None]:
    """The settings a GPU run serves and trains with, and the plan they came from.

    The fields of `PLANNED` come from the plan `appliance plan` prints for this machine's GPUs (`inventory`:
    (count, GB of the smallest), default nvidia-smi's), each unless appliance.toml or an APPLIANCE_* variable
    names it: the fields' own defaults (tensor parallel 1, 0.45 of one GPU) are a CPU machine's, and with
    training.processes = 0 on 8 GPUs they left serving on one GPU. The cpu profile, a machine without a
    visible GPU and a model folder without config.json (the engine's start says what is wrong) are left as
    they are; a model the plan cannot fit is a PlanError before anything starts.
    """
    if settings.profile != "gpu":
        return settings, None
    unset = [(section, key) for section, keys in PLANNED.items() for key in keys
             if key not in getattr(settings, section).model_fields_set]
    if not unset or not (settings.model_path / "config.json").is_file():
        return settings, None
    inventory = inventory or detect_gpus()
    if inventory is None:
        return settings, None
    try:
        plan = make_plan(read_model(settings.model_path), settings, *inventory)
    except PlanError as e:
        raise PlanError(e.message, f"{e.hint}; or set {', '.join(f'{s}.{k}' for s, k in unset)} yourself "
                        "(the plan is an estimate: `appliance plan` shows its arithmetic)") from None
    fitted = settings.model_copy(deep=True)
    for section, key in unset:
        setattr(getattr(fitted, section), key, getattr(plan, key))
    return fitted, plan


def detect_gpus() -> tuple[int, float] | None:
    """(count, memory GB of the smallest) of the visible NVIDIA GPUs from nvidia-smi, None without one."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    mib = [float(x) for x in out.split() if x.strip()]
    return (len(mib), min(mib) * 2**20 / GB) if mib else None
