"""Fakes and cheap real stand-ins that tests (and scripts) use; nothing in the product imports this.

Each section belongs to one component and says so in its heading.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# --- serving: a tiny random model for the CPU vLLM ---------------------------------------------------

# head_dim 32: the CPU attention kernels support 32/64/80/...; 16 crashes the engine.
TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=32, max_position_embeddings=4096)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def make_tiny_model(dest: Path, tokenizer_source: Path, *, seed: int = 0, tie_word_embeddings: bool = False) -> Path:
    """A seeded random llama (float32) with the bundled model's tokenizer and chat template.

    The weights are drawn with a large init scale so greedy decoding has clear winners: with the
    default 0.02 the logits are nearly flat and float rounding could flip near-ties between vLLM and
    transformers, which would make the canary flaky for reasons that are not bugs. Untied embeddings
    by default, so a full weight sync goes through vLLM's in-place reload (tied models restart the
    engine instead; see appliance.serving.engine).
    """
    import json

    import torch  # lazily: only tests and scripts build models
    from transformers import LlamaConfig, LlamaForCausalLM

    src_config = json.loads((tokenizer_source / "config.json").read_text())
    config = LlamaConfig(vocab_size=src_config["vocab_size"], bos_token_id=src_config.get("bos_token_id"),
                         eos_token_id=src_config.get("eos_token_id"), pad_token_id=src_config.get("pad_token_id"),
                         tie_word_embeddings=tie_word_embeddings, initializer_range=0.5, **TINY_CONFIG)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    copy_tokenizer(tokenizer_source, dest)
    return dest


def copy_tokenizer(source: Path, dest: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, dest / name)


def make_tiny_lora(dest: Path, base: Path, *, seed: int = 1, rank: int = 8) -> Path:
    """A LoRA adapter for `base` with random, non-zero B matrices, so it changes the model's outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank,
                                                  target_modules=["q_proj", "v_proj", "o_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.5)
    peft_model.save_pretrained(str(dest))
    return dest


def corrupt_checkpoint(folder: Path) -> Path:
    """Truncate the weights file in place, as a crash mid-write would leave it."""
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return folder


# --- training: a fake engine for the time-sliced LEARN phase ------------------------------------------

class FakeEngine:
    """Stands in for appliance.serving.Engine in training tests and benchmarks (`EngineControl`).

    Enforces the real engine's order, serving -> pause_for_training -> (load_weights | resume) -> serving,
    and fails loudly on any other: load_weights ends serving by itself (on the new weights, or on the old
    ones after a refused sync, raising EngineError). Optional delays imitate sleep, sync+wake+canary and
    wake. `loaded` lists (path, kind) per successful sync.
    """

    def __init__(self, *, policy_version: int = 0, pause_s: float = 0.0, sync_s: float = 0.0,
                 resume_s: float = 0.0, fail_load: bool = False) -> None:
        self._version = policy_version
        self.delays = {"pause": pause_s, "sync": sync_s, "resume": resume_s}
        self.fail_load = fail_load
        self.serving = True
        self.calls: list[str] = []
        self.loaded: list[tuple[Path, str]] = []

    @property
    def policy_version(self) -> int:
        return self._version

    def pause_for_training(self) -> None:
        if not self.serving:
            raise AssertionError(f"pause_for_training while already paused; calls so far: {self.calls}")
        self._step("pause")
        self.serving = False

    def load_weights(self, path: Path, kind: str) -> int:
        if self.serving:
            raise AssertionError(f"load_weights while serving (pause first); calls so far: {self.calls}")
        if kind not in ("lora", "full"):
            raise AssertionError(f"load_weights kind must be 'lora' or 'full', got {kind!r}")
        expected = "adapter_config.json" if kind == "lora" else "config.json"
        if not (Path(path) / expected).exists():
            raise AssertionError(f"{kind} checkpoint at {path} has no {expected}")
        self._step("sync")
        self.serving = True
        if self.fail_load:
            from appliance.errors import EngineError

            raise EngineError(f"fake engine refused {path}; the previous weights serve on",
                              "FakeEngine(fail_load=True) was asked to fail")
        self.loaded.append((Path(path), kind))
        self._version += 1
        return self._version

    def resume(self) -> None:
        if self.serving:
            raise AssertionError(f"resume while serving; calls so far: {self.calls}")
        self._step("resume")
        self.serving = True

    def _step(self, name: str) -> None:
        import time

        self.calls.append(name)
        if self.delays[name]:
            time.sleep(self.delays[name])


# --- training: a multi-process trainer worker that fails on one rank -----------------------------------

# What `appliance.training.multiprocess` launches instead of its worker when a test sets its WORKER to this.
FAILING_TRAIN_WORKER = ("appliance.testing", "failing-train-worker")


def failing_train_worker(argv: list[str]) -> None:
    """The real trainer worker, except that rank $APPLIANCE_TEST_FAIL_RANK (default 1) raises at its first GRPO
    step: after the model loaded, while the other ranks wait for it in the gradient all-reduce."""
    import os

    from appliance.training import trainer, worker

    fail_rank = int(os.environ.get("APPLIANCE_TEST_FAIL_RANK", "1"))
    if int(os.environ.get("RANK", "0")) == fail_rank:
        def fail(self, batch):
            raise RuntimeError(f"injected failure of training worker rank {fail_rank} (appliance.testing)")

        trainer.PolicyTrainer.grpo_step = fail
    worker.main(argv)


# --- harness: a scripted OpenAI-compatible policy, a fake shell, a fake clock ---------------------------

import json  # noqa: E402  (each section keeps its imports beside it)
from collections.abc import Callable, Mapping  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

IM_START, IM_END = 1, 2  # the char-level tokenizer's special tokens; text characters are ord(c) + 3


class ScriptDivergence(AssertionError):
    """The harness talked to ScriptedPolicy or FakeShell in a way the script did not foresee."""


@dataclass
class Reply:
    """One scripted answer of `ScriptedPolicy` (a plain string in a script is `Reply(content=...)`)."""

    content: str | None = None
    tool_calls: list[tuple[str, Any]] | None = None  # (name, arguments dict or raw string)
    expect: str | None = None  # must occur in a message the request added since the previous reply
    status: int = 200  # anything else answers with `error` as the body
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


def _char_ids(text: str) -> list[int]:
    return [ord(c) + 3 for c in text]


def chatml_completion_ids(message: Mapping[str, Any]) -> list[int]:
    """What the engine 'sampled' for an assistant message: its text, tool calls as the template writes
    them, and <|im_end|>."""
    text = message.get("content") or ""
    if message.get("tool_calls"):
        calls = []
        for c in message["tool_calls"]:
            fn = c["function"]
            args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
            calls.append('{"name": "' + fn["name"] + '", "arguments": ' + args + "}")
        text += "<tool_call>[" + ", ".join(calls) + "]</tool_call>"
    return _char_ids(text) + [IM_END]


def chatml_ids(messages: list[Mapping[str, Any]], tools: list[Any] | None = None) -> list[int]:
    """A char-level mirror of appliance/serving/chat_template.jinja with the generation prompt: stands in
    for the engine's prompt ids so harness tests can check that a conversation's prompts extend each
    other (a real tokenizer behaves the same whenever the text re-renders identically)."""
    ids = [IM_START] + _char_ids("system\n")
    first_system = bool(messages) and messages[0]["role"] == "system"
    ids += _char_ids(messages[0]["content"] if first_system else "You are a helpful AI assistant named SmolLM, "
                     "trained by Hugging Face")
    if tools:
        ids += _char_ids("\n\nYou can call tools. The tools you have:\n<tools>\n" + "".join(
            json.dumps(t.get("function", t)) + "\n" for t in tools) + "</tools>")
    ids += [IM_END] + _char_ids("\n")
    for m in messages[1:] if first_system else messages:
        if m["role"] == "assistant":
            ids += [IM_START] + _char_ids("assistant\n") + chatml_completion_ids(m) + _char_ids("\n")
        elif m["role"] == "tool":
            ids += [IM_START] + _char_ids(f"user\n<tool_response>\n{m['content']}\n</tool_response>") + [IM_END]
            ids += _char_ids("\n")
        else:
            ids += [IM_START] + _char_ids(f"{m['role']}\n{m['content']}") + [IM_END] + _char_ids("\n")
    return ids + [IM_START] + _char_ids("assistant\n")


class ScriptedPolicy:
    """An OpenAI chat-completions endpoint, in process (an httpx transport), that replays a script.

    It fails loudly (raises `ScriptDivergence`, and `assert_done` raises it again in case the harness
    swallowed it) when a request does not extend the previous request plus the reply it got, verbatim;
    when a reply's `expect` text is missing from the messages the request added; when the harness asks
    more often than the script answers. It records each answered call as the proxy would (`calls`:
    ModelCall with char-level ids), so a test can rebuild the rollout's training samples.
    """

    def __init__(self, script: list[Reply | str], *, rollout_id: str = "scripted", policy_version: int = 0) -> None:
        import httpx

        self.script = [Reply(content=s) if isinstance(s, str) else s for s in script]
        self.rollout_id, self.policy_version = rollout_id, policy_version
        self.requests: list[dict[str, Any]] = []
        self.calls: list[Any] = []
        self.failures: list[str] = []
        self._sent: list[dict[str, Any]] = []  # the last request's messages plus the reply to it
        self.transport = httpx.MockTransport(self._handle)

    def client_config(self, **overrides: Any) -> Any:
        from appliance.harness.base import ClientConfig

        return ClientConfig(base_url="http://scripted.invalid/v1", transport=self.transport, **overrides)

    def _fail(self, message: str) -> None:
        self.failures.append(message)
        raise ScriptDivergence(message)

    def _handle(self, request: Any) -> Any:
        import httpx

        from appliance.schemas import ModelCall

        if not request.url.path.endswith("/v1/chat/completions"):  # also under a proxy route /r/<token>
            self._fail(f"ScriptedPolicy only serves /v1/chat/completions, got {request.url.path}")
        body = json.loads(request.content)
        step = len(self.requests)
        self.requests.append(body)
        messages = body["messages"]
        if step >= len(self.script):
            self._fail(f"request {step + 1} but the script has {len(self.script)} replies; "
                       f"last message: {messages[-1]!r}")
        for i, (want, got) in enumerate(zip(self._sent, messages + [None] * len(self._sent))):
            if want != got:
                self._fail(f"request {step + 1} rewrote message {i}: expected {want!r}, got {got!r}")
        reply = self.script[step]
        new = messages[len(self._sent):] or messages[-1:]
        if reply.expect is not None and not any(reply.expect in str(m.get("content")) for m in new):
            self._fail(f"request {step + 1}: expected {reply.expect!r} in the new messages, got {new!r}")
        if reply.status != 200:
            return httpx.Response(reply.status, headers=reply.headers, text=reply.error)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{step}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)]
        prompt_ids, completion_ids = chatml_ids(messages, body.get("tools")), chatml_completion_ids(message)
        logprobs = [-0.5] * len(completion_ids)
        self.calls.append(ModelCall(None, self.rollout_id, step, "ok", body, None, prompt_ids, completion_ids,
                                    logprobs, self.policy_version, 0.0))
        self._sent = messages + [message]
        return httpx.Response(200, json={
            "id": f"scripted-{step}", "object": "chat.completion", "model": body.get("model"),
            "prompt_token_ids": prompt_ids,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason,
                         "token_ids": completion_ids}],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids),
                      "total_tokens": len(prompt_ids) + len(completion_ids)},
        })

    def assert_done(self) -> None:
        if self.failures:
            raise ScriptDivergence(self.failures[0])
        if len(self.requests) < len(self.script):
            raise ScriptDivergence(f"the harness stopped after {len(self.requests)} of {len(self.script)} "
                                   f"scripted replies; next unused: {self.script[len(self.requests)]!r}")


@dataclass(frozen=True, slots=True)
class FakeResult:
    """Looks like the sandbox's ExecResult."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0


class FakeShell:
    """A shell that answers scripted commands. `outputs` maps a command to its result: a FakeResult, a
    string (stdout, exit 0), an exception to raise (e.g. SandboxError: the sandbox died) or a callable
    of the command. An unscripted command raises `ScriptDivergence` unless a `default` is given."""

    def __init__(self, outputs: Mapping[str, FakeResult | str | BaseException | Callable[[str], FakeResult]]
                 | None = None, *, default: FakeResult | None = None) -> None:
        self.outputs = dict(outputs or {})
        self.default = default
        self.commands: list[str] = []
        self.timeouts: list[float | None] = []

    def run(self, cmd: str, timeout: float | None = None) -> FakeResult:
        self.commands.append(cmd)
        self.timeouts.append(timeout)
        if cmd not in self.outputs:
            if self.default is None:
                raise ScriptDivergence(f"FakeShell got the unscripted command {cmd!r}; scripted: {list(self.outputs)}")
            return self.default
        out = self.outputs[cmd]
        if isinstance(out, BaseException):
            raise out
        if isinstance(out, str):
            return FakeResult(stdout=out)
        return out(cmd) if callable(out) else out


class FakeClock:
    """A monotonic clock for limit tests: reading it advances time by `step`; `sleep` advances it too."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step, self.slept = 0.0, step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


# --- tui and control: a loop stand-in that answers controls, a recorded run, a writer process ----------

T0 = 1_790_000_000.0  # fixed timestamps keep snapshot tests byte-stable


class ControlConsumer:
    """Answers control requests the way the loop must (see `appliance.control`): at a safe point, in
    order, moving `runs.status` and acking each request with what it did.

    `step` advances the current iteration by one phase and leaves the run paused; `stop_after_iteration`
    is acknowledged at once and remembered (`stop_requested`), as the loop stops only at the iteration's
    end.
    """

    def __init__(self, store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.stop_requested = False

    def poll_once(self) -> int:
        from appliance.schemas import ControlCommand, ControlStatus, Phase, RunStatus

        answered = 0
        for ctl in self.store.pending_controls(self.run_id):
            status = self.store.get_run(self.run_id).status
            cmd = ctl.command
            if cmd == ControlCommand.PAUSE and status == RunStatus.RUNNING:
                self.store.set_run_status(self.run_id, RunStatus.PAUSED)
                result = "paused"
            elif cmd == ControlCommand.RESUME and status == RunStatus.PAUSED:
                self.store.set_run_status(self.run_id, RunStatus.RUNNING)
                result = "running"
            elif cmd == ControlCommand.STEP and status == RunStatus.PAUSED and self.store.iterations(self.run_id):
                its = self.store.iterations(self.run_id)
                phases = list(Phase)
                nxt = phases[min(phases.index(its[-1].phase) + 1, len(phases) - 1)]
                self.store.set_iteration_phase(self.run_id, its[-1].index, nxt)
                result = f"stepped to {nxt}; paused"
            elif cmd == ControlCommand.STOP_AFTER_ITERATION and status in (RunStatus.RUNNING, RunStatus.PAUSED):
                self.stop_requested = True
                result = "will stop at the end of this iteration"
            else:
                self.store.ack_control(ctl.id, f"cannot {cmd} while {status}", status=ControlStatus.REFUSED)
                answered += 1
                continue
            self.store.ack_control(ctl.id, result)
            answered += 1
        return answered

    def run_in_thread(self, interval_s: float = 0.05):
        """Poll in a daemon thread until the returned event is set."""
        import threading

        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                self.poll_once()
                done.wait(interval_s)

        threading.Thread(target=loop, daemon=True).start()
        return done


TOY_VOCAB = ["<s>", "system", "user", "assistant", "tool", "\n", " ls", " -la", " cat", " notes.txt", " echo",
             " hello", " >", " out.txt", "```", "bash", " done", " file", " total", " 4", " wc", " -l", " 3"]


def toy_decoder(ids: list[int]) -> list[str]:
    """A stand-in tokenizer for the recorded run's token ids (0..len(TOY_VOCAB)-1)."""
    return [TOY_VOCAB[i] if 0 <= i < len(TOY_VOCAB) else f"<{i}>" for i in ids]


def record_run(store, run_id: str = "demo", *, t0: float = T0) -> str:
    """Fill `store` with a small, fixed run as the loop records one: two finished iterations with reports
    and held-out evals, a third in the middle of training, a task pool in every status, a GRPO step of
    groups in every state, and rollouts whose model calls extend each other and branch once."""
    from appliance.schemas import (EngineState, Event, IterationStatus, ModelCall, Outcome, Phase, Rollout,
                                   RolloutStatus, Sample, Split, Task, TaskStatus)

    store.create_run(run_id, {"profile": "cpu"})
    store.set_engine_state(EngineState.STARTING, force=True)
    store.set_engine_state(EngineState.SERVING, policy_version=2)
    phases = [p for p in Phase if p != Phase.DONE]
    durations = [40, 65, 250, 90, 12, 70, 20]
    t = t0
    for idx in range(3):
        store.start_iteration(run_id, idx, policy_version=idx)
        upto = phases if idx < 2 else phases[:4]
        for phase, d in zip(upto, durations):
            store.set_iteration_phase(run_id, idx, phase)
            store.add_event(Event("phase", str(phase), run_id, {"iteration": idx}, created_at=t))
            t += d
        if idx < 2:
            store.set_iteration_phase(run_id, idx, Phase.DONE)
            store.set_iteration_status(run_id, idx, IterationStatus.DONE)
            for family, base in (("files", 0.5), ("shell", 0.2), ("git", 0.1)):
                store.set_eval(run_id, idx, idx, family, 1, 10, round(10 * (base + 0.15 * idx)))
            store.save_report(run_id, idx, {"iteration": idx}, report_markdown(idx))
    store.add_event(Event("error", "sandbox r-2-1-3 died: OOM", run_id, {"iteration": 2}, created_at=t - 100))
    store.add_event(Event("info", "practise: 24 rollouts, 2 infra errors", run_id, {"iteration": 2}, 250.0,
                          created_at=t - 95))
    for step in range(12):
        store.add_metrics(run_id, step, {"reward_mean": 0.1 + 0.03 * step + (0.04 if step % 3 == 0 else 0),
                                         "infra_error_rate": 0.08 if step in (4, 9) else 0.02})
    store.add_metrics(run_id, 11, {"logprob_gap_mean": 0.012, "loss": 0.31})
    for step in range(11):
        store.add_metrics(run_id, step, {"loss": 0.9 - 0.05 * step})

    statuses = [TaskStatus.PROPOSED, TaskStatus.VALID, TaskStatus.LEARNABLE, TaskStatus.LEARNABLE,
                TaskStatus.TOO_EASY, TaskStatus.TOO_HARD, TaskStatus.REJECTED]
    n = 0
    for family in ("files", "git", "shell"):
        for difficulty in (1, 2):
            for k, status in enumerate(statuses[: 4 + difficulty + (family == "shell")]):
                n += 1
                tid = f"{family}-{difficulty}-{k}"
                spec = {"id": tid, "family": family, "difficulty": difficulty,
                        "instruction": f"Write 'hello' into out.txt ({family}, level {difficulty}).",
                        "files": {"notes.txt": "a\nb\nc\n"}, "verify": "test \"$(cat out.txt)\" = hello",
                        "solution": "echo hello > out.txt"}
                store.add_task(Task(tid, run_id, family, difficulty, "procedural",
                                    Split.HELDOUT if k == 0 and difficulty == 1 else Split.TRAIN, status, spec,
                                    "reference solution fails the verifier" if status == TaskStatus.REJECTED else None,
                                    {TaskStatus.LEARNABLE: 0.5, TaskStatus.TOO_EASY: 1.0,
                                     TaskStatus.TOO_HARD: 0.0}.get(status), created_at=t0 + n))
    rollouts = []
    outcomes = [Outcome.SUCCESS, Outcome.FAILURE, Outcome.TRUNCATED, Outcome.INFRA_ERROR]
    for g, task in enumerate(["files-1-2", "files-2-3", "git-1-2", "shell-1-2", "shell-2-2", "git-2-3"]):
        for r in range(4):
            status = RolloutStatus.FINISHED if g < 4 else RolloutStatus.RUNNING if g == 4 else RolloutStatus.PENDING
            outcome = outcomes[(g + r) % 4] if status == RolloutStatus.FINISHED else None
            reward = {Outcome.SUCCESS: 1.0, Outcome.FAILURE: 0.0, Outcome.TRUNCATED: 0.0}.get(outcome)
            rollouts.append(Rollout(f"r-2-{g}-{r}", run_id, task, f"g-2-{g}", 2, "bash-agent", 2, status, "train",
                                    outcome, reward, "sandbox died: OOM" if outcome == Outcome.INFRA_ERROR else None,
                                    3 if status == RolloutStatus.FINISHED else 0, created_at=t0 + 1000 + 4 * g + r))
    store.add_rollouts(rollouts)
    # r-2-0-0: three calls; call 1 extends call 0, call 2 rewrites history (a compaction) and branches
    system = [0, 1, 5, 2, 10, 11, 12, 13, 5, 3]
    c0 = [14, 15, 6, 7, 14]
    tool0 = [5, 4, 18, 19, 5, 3]
    c1 = [14, 15, 10, 11, 12, 13, 14]
    calls = [ModelCall(None, "r-2-0-0", 0, "ok", {"messages": []}, None, system, c0, [-0.1, -0.2, -1.3, -0.4, -0.1],
                       2, 0.41, created_at=t0 + 1001),
             ModelCall(None, "r-2-0-0", 1, "ok", {"messages": []}, None, system + c0 + tool0, c1,
                       [-0.05, -0.1, -0.9, -0.2, -0.3, -0.2, -0.1], 2, 0.38, created_at=t0 + 1002),
             ModelCall(None, "r-2-0-0", 2, "ok", {"messages": []}, None, system + [4, 16, 5, 3], [16],
                       [-0.5], 2, 0.12, created_at=t0 + 1003)]
    store.add_model_calls(calls)
    seq0 = system + c0 + tool0 + c1
    store.add_samples([
        Sample("r-2-0-0", "g-2-0", 0, seq0, [0] * len(system) + [1] * len(c0) + [0] * len(tool0) + [1] * len(c1),
               [0.0] * len(seq0), 1.0, 2, 0.75),
        Sample("r-2-0-0", "g-2-0", 1, system + [4, 16, 5, 3, 16], [0] * (len(system) + 4) + [1],
               [0.0] * (len(system) + 5), 1.0, 2, 0.75)])
    store.set_engine_state(EngineState.DRAINING)
    store.set_engine_state(EngineState.SLEEPING)
    return run_id


def report_markdown(idx: int) -> str:
    rates = {"files": 0.5 + 0.15 * idx, "shell": 0.2 + 0.15 * idx, "git": 0.1 + 0.15 * idx}
    rows = "\n".join(f"| {f} | 1 | {r:.2f} |" for f, r in rates.items())
    regress = "- none" if idx == 0 else "- git-1-1: passed in iteration 0, fails now"
    return (f"# Capability report, iteration {idx}\n\n## Pass rate\n\n| family | difficulty | pass@1 |\n"
            f"| --- | --- | --- |\n{rows}\n\n## Failure modes\n\n- wrong answer: {12 - 3 * idx}\n"
            f"- bad tool call format: {6 - idx}\n- turn limit: 3\n\n## Regressions\n\n{regress}\n")


def run_fake_appliance(db_path: str, run_id: str, go_file: str, *, timeout_s: float = 120.0) -> None:
    """A stand-in for the headless appliance until the loop exists: a separate process that writes a run
    in its `synthesize` phase, waits until `go_file` appears, then moves to `validate`, while answering
    control requests. Run it with `python -c "from appliance.testing import run_fake_appliance; ..."`."""
    import time
    from pathlib import Path

    from appliance.schemas import Event, Phase
    from appliance.store import Store

    store = Store(db_path)
    store.create_run(run_id, {"profile": "cpu"})
    store.start_iteration(run_id, 0, policy_version=0)
    store.add_event(Event("phase", str(Phase.SYNTHESIZE), run_id, {"iteration": 0}))
    consumer = ControlConsumer(store, run_id)
    deadline = time.monotonic() + timeout_s
    moved = False
    while time.monotonic() < deadline:
        consumer.poll_once()
        if not moved and Path(go_file).exists():
            store.set_iteration_phase(run_id, 0, Phase.VALIDATE)
            store.add_event(Event("phase", str(Phase.VALIDATE), run_id, {"iteration": 0}))
            moved = True
        time.sleep(0.1)


# --- tasks: a scripted prompt -> text policy for self-proposal ------------------------------------------

class ScriptedText:
    """Answers prompts from a script, in order, and records them; a call past the script fails loudly."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        if len(self.prompts) >= len(self.replies):
            raise ScriptDivergence(f"ScriptedText got call {len(self.prompts) + 1}, but only "
                                   f"{len(self.replies)} replies are scripted; prompt: {prompt[:200]!r}")
        self.prompts.append(prompt)
        return self.replies[len(self.prompts) - 1]

    def done(self) -> bool:
        return len(self.prompts) == len(self.replies)


# --- proxy: an engine that answers instantly, to measure the proxy alone ----------------------------------

class InstantEngine:
    """`EngineLike` for a server running `instant_engine_app`: always SERVING, admits everything."""

    def __init__(self, base_url: str, policy_version: int = 0) -> None:
        from appliance.schemas import EngineState

        self.base_url = base_url
        self.policy_version = policy_version
        self.state = EngineState.SERVING

    def model_name(self) -> str:
        return "policy"

    def try_admit(self) -> bool:
        return True

    def release(self) -> None:
        pass


def instant_engine_app(n_tokens: int = 16):
    """A Starlette app shaped like vLLM's chat endpoint (ids, logprobs, SSE) that does no inference."""
    import json

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    prompt_ids = list(range(1, 33))
    logprob = {"token": " a", "logprob": -0.5, "bytes": [32, 97], "top_logprobs": []}

    async def chat(request: Request):
        body = await request.json()
        n = min(body.get("max_tokens") or n_tokens, n_tokens)
        base = {"id": "chatcmpl-instant", "created": 0, "model": body.get("model")}
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "prompt_token_ids": prompt_ids, "choices": [{
                "index": 0, "message": {"role": "assistant", "content": " a" * n},
                "logprobs": {"content": [logprob] * n}, "finish_reason": "length", "token_ids": [64] * n}],
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": n, "total_tokens": len(prompt_ids) + n}})

        def chunk(delta: dict, **extra) -> bytes:
            return ("data: " + json.dumps({**base, "object": "chat.completion.chunk", **extra}) + "\n\n").encode()

        async def events():
            yield chunk({}, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                      "finish_reason": None}], prompt_token_ids=prompt_ids)
            for i in range(n):
                yield chunk({}, choices=[{"index": 0, "delta": {"content": " a"}, "logprobs": {"content": [logprob]},
                                          "finish_reason": "length" if i == n - 1 else None, "token_ids": [64]}])
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve_instant_engine(port: int, n_tokens: int = 16) -> None:
    """Run `instant_engine_app` in the foreground (a benchmark starts it in its own process)."""
    import uvicorn

    uvicorn.run(instant_engine_app(n_tokens), host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":  # a stand-in process a test launches: python -m appliance.testing NAME ARGS...
    import sys

    {"failing-train-worker": failing_train_worker}[sys.argv[1]](sys.argv[2:])
