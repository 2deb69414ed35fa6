"""The built-in harness: a compact bash agent loop for small models, over plain OpenAI chat completions.

Each turn the model answers; `actions.parse_action` reads a command (a `bash` tool call or a fenced
block), the sandbox's persistent shell runs it, and the truncated output goes back as the next message.
An answer without a usable action gets a one-line correction instead of ending the episode. The loop
ends on submit/DONE or on a limit (turns, completion tokens, wall time, the same command meeting the same
exit code `max_repeats` more times in a row), on context overflow, or when
the engine or the sandbox fails (an infra error: the runner must not blame the policy for it). With
`repeat_note`, a failing command that repeats the turn before is told so in its observation.

The assistant's messages are sent back exactly as received: the chat template then re-renders the
sampled tokens, each prompt extends the previous one, and the rollout's calls merge into one training
sequence (see `appliance.trajectories`). While the engine is training or syncing the proxy answers 503
with Retry-After; the loop waits, and that wait does not count against the agent's wall time.

    episode = run_builtin(task.instruction, sandbox.shell(), ClientConfig(base_url=route_url), Limits())
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from appliance.errors import ApplianceError, SandboxStorageFull
from appliance.harness.actions import Action, final_answer, format_observation, parse_action
from appliance.harness.base import ClientConfig, EndReason, Episode, Limits, says_context_overflow
from appliance.seams import CommandResult, Shell

SYSTEM_PROMPT = """You are a careful agent working in a Linux shell. You are in /workspace, where the \
task's files are. Each turn, reply with exactly one bash command in a ```bash block; you will then see \
its output. Use the real file names from the task. You are not root: never use sudo. When the task is \
finished, reply with DONE.

Example.
Task: Write the number of lines of data.txt into count.txt.
You:
```bash
wc -l < data.txt > count.txt
```
Output: exit code 0 (no output)
You:
```bash
cat count.txt
```
Output: exit code 0
42
You: DONE"""

TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run one bash command in /workspace and see its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Say the task is finished.",
        "parameters": {"type": "object", "properties": {}}}},
]

_RETRIES = 3  # transport errors and 5xx answers before the engine counts as failed
_MAX_RETRY_AFTER_S = 30.0


class _Stop(Exception):
    def __init__(self, reason: EndReason, error: str | None = None) -> None:
        super().__init__(error or reason.value)
        self.reason, self.error = reason, error


class _Model:
    """One OpenAI-compatible endpoint; waits out 503/429 (the engine is busy) and retries transient errors."""

    def __init__(self, cfg: ClientConfig, limits: Limits, sleep: Callable[[float], None]) -> None:
        self.cfg, self.limits, self.sleep = cfg, limits, sleep
        self.waited_s = 0.0
        self.http = httpx.Client(base_url=cfg.base_url.rstrip("/"), transport=cfg.transport,
                                 headers={"Authorization": f"Bearer {cfg.api_key}"}, timeout=cfg.request_timeout_s)

    def complete(self, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.cfg.model, "messages": messages, "temperature": self.cfg.temperature,
                                "max_tokens": max_tokens, **self.cfg.extra_body}
        if self.cfg.native_tools:
            body |= {"tools": TOOLS, "tool_choice": "auto"}
        failures = 0
        while True:
            try:
                r = self.http.post("/chat/completions", json=body)
            except httpx.TransportError as e:
                r, error = None, f"{type(e).__name__}: {e}"
            if r is not None and r.status_code in (429, 503):
                delay = _retry_after(r)
                if self.waited_s + delay > self.limits.engine_wait_s:
                    raise _Stop(EndReason.MODEL_ERROR,
                                f"engine unavailable for {self.waited_s:.0f} s (HTTP {r.status_code})")
                self.sleep(delay)
                self.waited_s += delay
                continue
            if r is not None and r.status_code == 200:
                return _first_choice(r)
            if r is not None:
                error = f"HTTP {r.status_code}: {r.text[:300]}"
                if r.status_code == 400 and says_context_overflow(r.text):
                    raise _Stop(EndReason.CONTEXT_OVERFLOW, error)
                if r.status_code < 500:
                    raise _Stop(EndReason.MODEL_ERROR, error)
            failures += 1
            if failures >= _RETRIES:
                raise _Stop(EndReason.MODEL_ERROR, error)
            self.sleep(float(failures))


def _retry_after(r: httpx.Response) -> float:
    try:
        return min(max(float(r.headers.get("retry-after", "2")), 0.1), _MAX_RETRY_AFTER_S)
    except ValueError:
        return 2.0


def _first_choice(r: httpx.Response) -> dict[str, Any]:
    try:
        data = r.json()
        choice = data["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise _Stop(EndReason.MODEL_ERROR, f"malformed completion ({e!r}): {r.text[:300]}") from None
    usage = data.get("usage") or {}
    tokens = usage.get("completion_tokens")
    if tokens is None:  # engines that return token ids but no usage
        tokens = len(choice.get("token_ids") or []) or len(message.get("content") or "") // 4 + 1
    # Only what the template renders goes back: extra fields (reasoning, refusal) would change nothing
    # the model sees, and the content stays byte for byte what the engine produced.
    kept = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    return {"message": kept, "tokens": int(tokens)}


def _reply(action: Action, text: str) -> list[dict[str, Any]]:
    """The observation as the next message(s): tool messages answer native tool calls (one per call id)."""
    if not action.tool_call_ids:
        return [{"role": "user", "content": text}]
    first, *rest = action.tool_call_ids
    return [{"role": "tool", "tool_call_id": first, "content": text}] + [
        {"role": "tool", "tool_call_id": i, "content": "Not run: one command per turn."} for i in rest]


# Appended to the observation of a failing command that repeats the turn before (limits.repeat_note): a small
# model re-runs its failing command until the episode ends, and nothing in the output says it already did.
REPEAT_NOTE = ("\n(This is the command you ran last turn, and it failed the same way. Running it again will not "
               "help: change it, or look at the files first.)")


# Appended to a question task's request (TaskSpec.answer): the answer is the text of the message that says DONE.
ANSWER_NOTE = "Give the answer in your last message, on the line before DONE."


def request_of(instruction: str, answer: bool) -> str:
    """The request the built-in agent gets for a task (a question task's says where the answer goes)."""
    return f"{instruction.strip()} {ANSWER_NOTE}" if answer else instruction


def first_messages(task_instruction: str) -> list[dict[str, Any]]:
    """The conversation an episode starts from: the system prompt and the task (demonstrations reuse it)."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Task: {task_instruction.strip()}"}]


def observation_messages(action: Action, result: CommandResult, limits: Limits, timeout: float) -> list[dict[str, Any]]:
    """The message(s) that carry a command's result back to the model: the one turn formatter of the
    built-in agent, which demonstrations use too, so a demonstration's observation is the episode's."""
    return _reply(action, format_observation(result, limits.observation_chars, timeout))


def run_builtin(task_instruction: str, shell: Shell, client_config: ClientConfig, limits: Limits | None = None, *,
                sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Episode:
    """Run one episode of the built-in agent on `task_instruction` in `shell`; never raises for the model's
    or the sandbox's failures (they are end reasons), only for bugs."""
    limits = limits or Limits()
    messages = first_messages(task_instruction)
    episode = Episode(EndReason.TURN_LIMIT, 0, messages)
    model = _Model(client_config, limits, sleep)
    start = clock()
    last_turn: tuple[str | None, int | None] | None = None  # the previous command (or reply) and its exit code
    repeats = 0
    try:
        while True:
            agent_time = clock() - start - model.waited_s
            if episode.turns >= limits.max_turns:
                raise _Stop(EndReason.TURN_LIMIT)
            if episode.completion_tokens >= limits.max_completion_tokens:
                raise _Stop(EndReason.TOKEN_LIMIT)
            if agent_time >= limits.wall_time_s:
                raise _Stop(EndReason.TIME_LIMIT)
            budget = limits.max_completion_tokens - episode.completion_tokens
            answer = model.complete(messages, min(client_config.max_tokens, budget))
            episode.turns += 1
            episode.completion_tokens += answer["tokens"]
            messages.append(answer["message"])
            action = parse_action(answer["message"])
            exit_code = None
            if action.command is not None:
                remaining = limits.wall_time_s - (clock() - start - model.waited_s)
                timeout = max(1.0, min(limits.command_timeout_s, remaining))
                try:
                    result = shell.run(action.command, timeout)
                except SandboxStorageFull:  # not this episode's error: no episode can run (practice requeues it)
                    raise
                except ApplianceError as e:
                    raise _Stop(EndReason.SANDBOX_ERROR, str(e)) from None
                episode.commands += 1
                exit_code = result.exit_code
            if action.submit:
                episode.answer = final_answer(answer["message"])
                raise _Stop(EndReason.SUBMITTED)
            # The same reply meeting the same exit code again is a loop, not a try: a small model that repeats
            # a turn twice repeats it to the turn limit, and every such turn costs a longer prompt.
            turn = (action.command if action.command is not None else answer["message"].get("content"), exit_code)
            repeats = repeats + 1 if turn == last_turn else 0
            last_turn = turn
            if limits.max_repeats and repeats >= limits.max_repeats:
                raise _Stop(EndReason.REPEATING, f"the same reply {repeats + 1} turns in a row")
            if action.command is not None:
                said = observation_messages(action, result, limits, timeout)
                if limits.repeat_note and repeats and exit_code:
                    said[0] = {**said[0], "content": said[0]["content"] + REPEAT_NOTE}
                messages.extend(said)
            else:
                episode.parse_errors += 1
                messages.extend(_reply(action, action.feedback or ""))
    except _Stop as stop:
        episode.end_reason, episode.error = stop.reason, stop.error
    finally:
        model.http.close()
        episode.engine_wait_s = model.waited_s
        episode.elapsed_s = clock() - start
    return episode
