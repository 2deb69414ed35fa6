"""The settings tree itself: one pydantic model per section, every field with its help text, the two
profiles' defaults, and `Settings` with the paths derived from `home` (see the package docstring for where
values come from)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from appliance.config.evaluation import EvaluationSettings
from appliance.config.harnesses import ExternalHarnessSettings, default_harnesses
from appliance.config.section import Section
from appliance.config.training import TrainingSettings
from appliance.errors import ConfigError

Profile = Literal["cpu", "gpu"]
DEFAULT_HOME = Path("~/.local/share/appliance").expanduser()
BUNDLED_MODEL_NAME = "SmolLM2-135M-Instruct"


class PodmanSettings(Section):
    runtime: str = Field("runc", description="OCI runtime podman uses (crun fails on cgroup v1 hybrid hosts).")
    graphroot: Path | None = Field(
        None, description="Image and container storage; default $APPLIANCE_HOME/containers/storage.")
    storage_driver: str = Field("overlay", description="containers/storage driver (overlay or vfs).")
    additional_image_stores: list[Path] = Field(
        default_factory=list, description="Read-only image stores shared into this root (storage.conf "
                                          "additionalimagestores).")


class SandboxSettings(Section):
    image: str = Field("appliance-sandbox", description="Name of the sandbox image (tagged by recipe hash).")
    memory: str = Field("512m", description="Memory limit per sandbox, swap included (podman --memory).")
    pids_limit: int = Field(256, ge=16, description="Maximum processes per sandbox (fork-bomb guard).")
    cpus: float = Field(1.0, gt=0, description="CPU share per sandbox (podman --cpus).")
    lifetime_s: int = Field(1800, ge=10, description="Hard lifetime: podman kills and removes the sandbox after this.")
    exec_timeout_s: float = Field(60.0, gt=0, description="Time limit of a command the appliance runs in a sandbox "
                                  "without one of its own (`appliance sandbox exec`). An agent's command has "
                                  "harness.command_timeout_s; a task's scripts have the task's [limits].")
    output_limit_bytes: int = Field(
        1_000_000, ge=1024, description="Output of one command kept per stream; the rest is cut with a marker.")
    max_concurrent: int = Field(8, ge=1, description="Sandboxes alive at once (the pool's cap).")
    start_retries: int = Field(2, ge=0, description="Retries of a failed sandbox start before it counts as infra "
                               "error.")
    workspace_size: str | None = Field(
        None, description="Size cap of /workspace, a tmpfs inside each sandbox that counts against sandbox.memory "
                          '(e.g. "128m"); default a quarter of sandbox.memory.')
    validation_reuse: int = Field(
        25, ge=1, description="Tasks validated one after another in one sandbox, scrubbed between them (every process "
                              "killed, every writable place wiped and checked); 1 = a new sandbox per task "
                              "(~2x slower).")
    block_user_namespaces: bool = Field(
        True, description="Run sandboxes under the appliance's seccomp profile (appliance/sandbox/seccomp.json): "
                          "no new user namespaces, no mount/bpf/keyring/io_uring calls. No configured harness needs "
                          "them.")


class EngineSettings(Section):
    model: Path | None = Field(
        None, description=f"Hugging Face model folder to serve and train; default "
                          f"$APPLIANCE_HOME/models/{BUNDLED_MODEL_NAME}.")
    served_model_name: str = Field("policy", description="Model name harnesses send; any name is accepted by the "
                                   "proxy.")
    host: Literal["127.0.0.1"] = Field("127.0.0.1", description="The engine listens on loopback only.")
    port: int = Field(8100, ge=1024, le=65535, description="Engine (vLLM) port on loopback.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "float32", description="Serving dtype; float32 on the CPU reproduces the trainer's logprobs.")
    max_model_len: int = Field(4096, ge=256, description="Context length the engine serves.")
    enforce_eager: bool = Field(True, description="Skip graph compilation (saves ~100 s per start on the CPU).")
    enable_sleep_mode: bool = Field(False, description="vLLM sleep mode while training (GPU only).")
    sleep_level: Literal[1, 2] = Field(1, description="vLLM sleep level: 1 offloads weights, 2 discards them.")
    gpu_memory_utilization: float = Field(0.45, gt=0, le=1, description="Share of GPU memory for serving (GPU only).")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs the engine shards the model across.")
    cpu_kvcache_gib: int = Field(1, ge=1, description="KV cache size on the CPU build (VLLM_CPU_KVCACHE_SPACE).")
    startup_timeout_s: float = Field(300.0, gt=0, description="Seconds to wait for the engine to become healthy (the "
                                     "gpu profile waits longer: a cold start compiles the model's CUDA graphs, LoRA's "
                                     "included).")
    weights_timeout_s: float = Field(
        900.0, gt=0, description="Longest wait for one sleep, wake-up, weight reload or adapter load of the engine "
        "(each moves the whole model's weights: minutes for a large one); its other calls wait 120 s.")
    max_lora_rank: int = Field(64, ge=1, description="Largest LoRA rank the engine accepts (vLLM --max-lora-rank).")
    tool_call_parser: str = Field(
        "auto", min_length=1,
        description="vLLM's tool-call parser (--tool-call-parser), which turns the model's written calls into "
        "OpenAI tool_calls: auto picks it from the chat template and the model family (xlam for the bundled "
        "template, hermes for Qwen2.5/Qwen3, llama3_json for Llama 3.1+, mistral; appliance/serving/tool_calls.py), "
        "none serves without one; any other name goes to vLLM as it is. harness.native_tools needs one.")
    canary_tokens: int = Field(16, ge=1, description="Greedy tokens of the canary generation checked after every sync "
                               "or wake.")
    canary_tolerance: float = Field(
        0.0, ge=0, le=1,
        description="Nats by which a canary token's log-probability may differ from the reference's, and the top-2 "
                    "margin below which an argmax flip is a near-tie (appliance/serving/canary.py); 0 = the tokens "
                    "must be equal (float32 serving).")
    drain_timeout_s: float = Field(600.0, gt=0, description="Longest wait for in-flight model calls before sleeping.")
    hang_timeout_s: float = Field(120.0, gt=0, description="A one-token probe generation unanswered this long means "
                                  "the engine hangs (its /health still answers): it is restarted.")


class ProxySettings(Section):
    host: Literal["127.0.0.1"] = Field("127.0.0.1", description="The proxy listens on loopback only.")
    port: int = Field(8200, ge=0, le=65535, description="Proxy port on loopback; 0 takes a free one when the proxy "
                      "starts.")
    max_request_bytes: int = Field(2_000_000, ge=1024, description="Largest request body accepted.")
    max_tokens: int = Field(1024, ge=1, description="Cap on max_tokens of one model call.")
    max_concurrency_per_rollout: int = Field(4, ge=1, description="Model calls in flight per rollout.")
    retry_after_s: int = Field(5, ge=1, description="Retry-After seconds sent with 503 while the engine is not "
                               "serving.")
    side_models: list[str] = Field(
        ["side"], description="Model names a harness sends for its side calls (a title, a summary: its 'small "
        "model'; the recipes name it `side`): such a call is recorded with status `side`, its own row beside the "
        "policy's working turns, and not trained unless train_side_calls.")
    train_side_calls: bool = Field(
        False, description="Train side calls too (recorded as ordinary `ok` calls: the tree gives each its own "
        "branch, since it shares no history with the working turns). Off: they are recorded, never trained.")

    @field_validator("port")
    @classmethod
    def _not_privileged(cls, port: int) -> int:
        if 0 < port < 1024:
            raise ValueError("must be 0 (a free port) or 1024..65535")
        return port


class HarnessSettings(Section):
    max_turns: int = Field(10, ge=1, description="The most model calls an episode may take, with either "
                           "harness: a task's own `[limits] max_turns` is honoured up to this cap.")
    max_completion_tokens: int = Field(4096, ge=1, description="Completion tokens per episode, summed over its calls.")
    max_tokens_per_call: int = Field(384, ge=1, description="max_tokens of one call of the built-in harness.")
    max_repeats: int = Field(2, ge=0, description="The built-in agent's episode ends (failure mode `repeating`) when "
                             "a turn repeats the one before (the same command, the same exit code) this many times "
                             "in a row; 0 = never.")
    repeat_note: bool = Field(False, description="The built-in agent's observation of a failing command that repeats "
                              "the turn before says so (running it again will not help; change it or look first), "
                              "before `max_repeats` ends the episode: about half of a trained policy's dev-set "
                              "rollouts ended repeating a failing command.")
    wall_time_s: float = Field(600.0, gt=0, description="The agent's time per episode; waiting for a busy engine "
                               "(503) does not count.")
    command_timeout_s: float = Field(60.0, gt=0, description="Time limit of one command the agent runs, with either "
                                     "harness: a task's own `[limits] command_timeout_s` is honoured up to this cap.")
    observation_chars: int = Field(2000, ge=100, description="Command output shown to the model; longer keeps head and "
                                   "tail.")
    engine_wait_s: float = Field(3600.0, gt=0, description="Longest wait for an engine answering 503 before the "
                                 "episode is an infra error.")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature of the built-in harness.")
    wheelhouse: Path | None = Field(
        None, description="Folder of wheels the third-party harness layers are installed from, offline "
        "(pip --no-index --find-links); the container image sets it. None: pip's own indexes.")
    native_tools: bool = Field(
        False, description="Offer bash/submit as OpenAI tools (needs the engine's tool parser); fenced blocks always "
                           "work.")
    stop: list[str] = Field(
        ["```\n"], description="Stop strings (kept in the output): end a turn at the first closed code block, so a "
        "small model does not go on to invent the command's output and its next turns."
    )


class LoopSettings(Section):
    iterations: int = Field(3, ge=1, description="Training iterations of a run (`appliance run --iterations`).")
    harness: str = Field("builtin", description="Harness that practises: builtin or a name under [harnesses].")
    families: list[str] = Field(default_factory=list, description="Task families to practise; empty = all.")
    tasks_per_iteration: int = Field(8, ge=1, description="New training tasks synthesized per iteration.")
    group_size: int = Field(4, ge=2, description="Rollouts per task (one GRPO group; also the agent-based validation).")
    band: tuple[float, float] = Field(
        (0.0, 1.0), description="Learnable band: tasks whose group pass rate lies strictly inside are trained on.")
    train_steps: int = Field(2, ge=1, description="GRPO optimizer steps per iteration (groups are dealt over them).")
    heldout_levels: list[int] = Field(
        [2, 3, 4], description="Difficulty levels of the held-out evaluation set (levels 2-4: the template-held-out "
        "operations and phrasings, docs/TASKS.md).")
    heldout_per_cell: int = Field(2, ge=1, description="Held-out tasks per family x level (fixed at run start).")
    training_window: str | None = Field(
        None, description="Practise and train only inside this local time window, e.g. '22:00-06:00'; None = always.")
    deadline: dt.datetime | None = Field(
        None, description="When practice and training end (ISO 8601, or `appliance run --minutes`): a PRACTISE stops "
        "starting rollouts once only its LEARN's time is left (the run's last LEARN took, or train_reserve_s), no "
        "iteration starts without that time, and the last evaluation runs past it. None: no deadline.")
    train_reserve_s: float = Field(900.0, gt=0, description="A LEARN's time under a deadline, until one has run.")
    tick_s: float = Field(2.0, gt=0, description="How often the scheduler calls the loop's reconciler.")
    nice: int = Field(
        5, ge=0, le=19, description="The nice value `appliance run` does its work at (the loop, and the engine, "
        "trainer and sandboxes it starts): an operator's `appliance pause` or TUI gets the CPU first on a busy "
        "machine (beside a training loop on 2 cores a command took 9-13 s, most of it waiting for a core); 0 = the "
        "priority it was started with. A higher nice it was started with is kept.")
    phase_attempts: int = Field(
        3, ge=1, description="Attempts a phase gets in a row (one a tick) before the run stops as failed with the "
        "cause in its events; `appliance run` continues the run once the cause is fixed.")
    analysis: bool = Field(True, description="Let the policy write the short analysis in each capability report "
                           "(one greedy call of up to 96 tokens; off on the cpu profile, where it took 60 s and its "
                           "text was withheld as naming no family).")
    warmstart_first: bool = Field(
        True, description="With demonstrations on, the first iteration of a run that has no trained weights yet "
        "does not practise: its LEARN phase is the warm-start SFT alone, and practice starts from a policy that "
        "already answers in the harness's format (the bundled base model's practice rollouts were 179 of 220 "
        "truncated at the turn limit, 28 successes, in 16 of a 2-hour run's minutes).")
    extra_draws: int = Field(
        4, ge=0, description="Dynamic sampling: extra rollouts (at most, per task and iteration, drawn group_size "
        "at a time) for a task whose group scored all the same, so it has a non-zero advantage to learn from; 0 = off."
    )
    controller: Literal["climb", "simple"] = Field(
        "climb", description="Difficulty controller: climb = evidence pooled over a window with Wilson bounds, a level "
        "mix (frontier, stretch, replay), demonstrations and k-sample held-out pass@1 with intervals; simple = "
        "the first controller (one step on each report, split budget)."
    )
    start_level: int = Field(
        2, ge=1, le=5, description="The frontier every family starts a run at (nothing is counted as mastered "
        "below it). Level 1 spells the command out; with a warm-start on level 2-4 demonstrations, practice there "
        "spent most of the practice on copying commands (a 2-hour run's first practice: 152 of 236 rollouts at "
        "level 1, 101 passing; level-2 tasks with the partial hint passed 16 of 84), so 2 spends it on reading "
        "requests. 1 suits a loop without demonstrations.")
    controller_window: int = Field(
        3, ge=1, description="Iterations of evidence the difficulty controller pools per family and level.")
    tasks_per_family: int = Field(
        3, ge=1, description="Fewest training tasks per family and iteration (the controller sizes each round to "
        "max(tasks_per_iteration, this x families))."
    )
    replay_share: float = Field(
        0.25, ge=0, le=1, description="Share of each family's tasks that replay learnable, not yet mastered tasks of "
        "earlier iterations (or mastered levels), instead of new ones."
    )
    stretch_share: float = Field(
        0.25, ge=0, le=1, description="Share of each family's new tasks one level above its frontier (with hints "
        "where the family offers them)."
    )
    compose: int = Field(
        2, ge=0, description="Two-part requests made each SYNTHESIZE from the run's valid training tasks at their "
        "family's frontier level (appliance.tasks.compose): the second synthesis routine, teacher-free (the parts' "
        "references and verifiers). 0 = off.")
    propose: int = Field(
        8, ge=0, description="Tasks the policy proposes each SYNTHESIZE for the last report's weakest families "
        "(appliance.tasks.propose), sent at once; validated in isolation like any task. 0 = off (the cpu profile: "
        "the bundled model's proposals parsed 0 of 14, and a round of 8 outlasted the 300 s request timeout).")
    propose_max_tokens: int = Field(512, ge=64, description="Tokens one proposal may take (four fenced sections).")
    propose_temperature: float = Field(
        0.7, ge=0, le=2, description="Sampling temperature of a proposal (greedy gives the same one every round).")


PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {
        "engine": {"dtype": "float32", "enforce_eager": True, "enable_sleep_mode": False},
        # a 135M model on 2 cores: short calls. The turn cap was 4, below every family task's own limit (6 at
        # level 1): 63 of 144 rollouts on independent chores were cut by it, and the tasks' limits gave 12/144
        # solved instead of 8/144 (issue 29). 8 gives multi-step chores (levels 2-3) their turns and bounds
        # an episode that loops.
        "harness": {"max_turns": 8, "max_tokens_per_call": 160},
        # one sequence per forward pass: the logits of a 49k vocabulary over a multi-turn sample are the
        # memory peak (4 at a time took the process to 20 GB and the OOM killer)
        # SFT: 4 samples a step at 5e-4 beat 1 a step at 1e-4 on other tasks' demonstrations (NLL 1.12 vs
        # 1.23 after 66 demonstrations, `scripts/bench warmstart --per 2`) at a quarter of the time.
        # All weights beat a LoRA adapter on a phrasing the phase never trained on (NLL 2.21 -> 0.71 at 1.5e-4,
        # 0.76 at 5e-5, LoRA r=16 at 5e-4 0.92; `scripts/bench warmstart --per 3 --epochs 2 --dev-phrasing 2`)
        # for 1.3x the time. RL keeps SFT's ratio of 1:5 as it had with LoRA.
        "training": {"method": "both", "full_finetune": True, "learning_rate": 3e-5, "sft_learning_rate": 1.5e-4,
                     "micro_batch_size": 1, "max_seq_len": 2048},
        # What the bundled model writes outside an episode costs minutes an iteration at 1-3 tokens/s and gave
        # nothing (issue 49). Self-proposal: 0 of 14 proposals parsed (`scripts/bench propose`), no store on
        # this machine holds a self-proposed task, and the one round asked in a run (8 x 512 tokens) hit the
        # 300 s request timeout (5.1 min), its retry still waiting 4.4 min later at the stop: none made. The
        # analysis: 60 s of a 60.3 s DIAGNOSE, its one stored text withheld by the quality gate (it names no
        # family). Composition (`loop.compose`) adds the tasks here; a larger model (the gpu profile) keeps both.
        "loop": {"propose": 0, "analysis": False},
    },
    "gpu": {
        # bfloat16 serving against the float32 canary reference, compared by log-probability distance.
        # Measured with scripts/canary_tolerance.py (SmolLM2-135M, 8 prompts x 32 greedy tokens, bfloat16
        # vs float32 transformers on the CPU): |delta logprob| of the greedy tokens p99 0.13, max 0.15 nats;
        # argmax flips only at float32 top-2 margins <= 0.12. Tolerance = 2 x the largest delta seen; 5 %
        # weight noise needs >= 0.5. bfloat16 vLLM on a GPU has other kernels: a GPU check must confirm it
        # (serving/canary.py says how).
        # startup: vLLM compiles the model and captures CUDA graphs, the LoRA ones too, on a cold cache; 300 s
        # was tight for that on one GPU
        "engine": {"dtype": "bfloat16", "enforce_eager": False, "enable_sleep_mode": True, "canary_tolerance": 0.3,
                   "startup_timeout_s": 1200.0},
        "sandbox": {"max_concurrent": 32},
        # one trainer process per GPU while serving sleeps (the engine spans them with tensor_parallel_size)
        "training": {"dtype": "bfloat16", "gradient_checkpointing": True, "processes": 0},
    },
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="APPLIANCE_", env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    home: Path = Field(DEFAULT_HOME, description="Data directory: store, models, checkpoints, Podman config.")
    profile: Profile = Field("cpu", description="cpu = the embedded default (bundled model); gpu = a GPU server.")
    podman: PodmanSettings = Field(default_factory=PodmanSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    harness: HarnessSettings = Field(default_factory=HarnessSettings)
    loop: LoopSettings = Field(default_factory=LoopSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    harnesses: dict[str, ExternalHarnessSettings] = Field(
        default_factory=default_harnesses, description="Third-party harnesses run unmodified inside the sandbox."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init carries the TOML file merged over the profile defaults; the environment wins over both.
        return (env_settings, init_settings)

    @field_validator("harnesses", mode="before")
    @classmethod
    def _harnesses_over_the_defaults(cls, given: Any) -> Any:
        # `[harnesses.opencode] timeout_s = 1800` changes that field of the built-in entry, and `[harnesses.mine]`
        # adds one beside them: a table replaced the whole entry (recipe and command required) or every default
        if not isinstance(given, dict):
            return given
        merged: dict[str, Any] = {name: h.model_dump() for name, h in default_harnesses().items()}
        for name, entry in given.items():
            if name not in merged and name.replace("_", "-") in merged:
                name = name.replace("_", "-")  # APPLIANCE_HARNESSES__CLAUDE_CODE__X: no hyphen in a name
            base = merged.get(name)
            merged[name] = base | entry if isinstance(base, dict) and isinstance(entry, dict) else entry
        return merged

    @model_validator(mode="after")
    def _lora_rank_fits_the_engine(self) -> Settings:
        self.check_lora_rank()
        return self

    @model_validator(mode="after")
    def _practice_harness_fits_the_engine(self) -> Settings:
        # a tool harness's first prompt over the served context fails every rollout as an infra error
        h = self.harnesses.get(self.loop.harness)
        if h is not None and h.context_tokens > self.engine.max_model_len:
            raise ConfigError(
                f"loop.harness {self.loop.harness} needs a served context of {h.context_tokens} tokens ([harnesses."
                f"{self.loop.harness}] context_tokens), engine.max_model_len is {self.engine.max_model_len}",
                f"set engine.max_model_len = {h.context_tokens} (the bundled model serves up to 8192), or practise "
                "with a harness whose first prompt is shorter")
        return self

    def check_lora_rank(self) -> None:
        """A LoRA adapter above the engine's --max-lora-rank is refused by vLLM at its first sync, after a whole
        LEARN phase: refuse it when the settings load (and at a LEARN phase's start, for a value set later)."""
        t, e = self.training, self.engine
        if not t.full_finetune and t.lora_rank > e.max_lora_rank:
            raise ConfigError(
                f"training.lora_rank {t.lora_rank} is above engine.max_lora_rank {e.max_lora_rank}: the engine would "
                "refuse the trained adapter at its first sync",
                f"set training.lora_rank to at most {e.max_lora_rank}, or engine.max_lora_rank = {t.lora_rank} "
                "(vLLM reserves LoRA memory for that rank)")

    # Paths derived from `home`; one place so no module invents its own layout.
    @property
    def db_path(self) -> Path:
        return self.home / "appliance.db"

    @property
    def model_path(self) -> Path:
        return self.engine.model or self.home / "models" / BUNDLED_MODEL_NAME

    @property
    def checkpoints_dir(self) -> Path:
        return self.home / "checkpoints"

    @property
    def podman_dir(self) -> Path:
        return self.home / "podman"

    @property
    def podman_graphroot(self) -> Path:
        return self.podman.graphroot or self.home / "containers" / "storage"

    @property
    def sockets_dir(self) -> Path:
        return self.home / "sockets"
