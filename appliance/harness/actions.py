"""Reading an action out of a small model's answer, and writing command output back to it.

A 135M model rarely produces a clean tool call: it answers in prose with a fenced block, prefixes
commands with `$ ` or `sudo`, writes Python where bash was asked for, or emits the tool-call syntax as
plain text. The parser accepts, in this order: a native `bash`/`submit` tool call; a `<tool_call>` JSON
written in the text; the first fenced ```bash (or sh, console, unlabelled) block; a ```python block (run
with python3); lines starting with `$ `. `DONE` on a line of its own, or a `submit` tool call, ends the
episode. When nothing usable is found the `Action` carries a short message for the model instead of an
error: feeding the mistake back is how a small model learns the format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

BASH_TOOLS = {"bash", "shell", "run", "execute", "terminal", "run_command", "exec"}
SUBMIT_TOOLS = {"submit", "done", "finish", "submit_answer"}
SUBMIT_COMMANDS = {"submit", "done", "exit", "exit 0"}
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "terminal", "zsh", "cmd", "command"}
PYTHON_LANGS = {"python", "python3", "py"}

FORMAT_HINT = "Reply with one command in a ```bash block, or DONE on its own line when the task is finished."

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_TOOL_CALL_TEXT = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_DONE = re.compile(r"^\W*(DONE|TASK COMPLETE|TASK_COMPLETE|COMPLETE_TASK)\W*$", re.MULTILINE | re.IGNORECASE)
_SUDO = re.compile(r"(^|[;&|(]\s*)sudo\s+(-\S+\s+)*")


@dataclass(frozen=True, slots=True)
class Action:
    command: str | None = None  # bash to run
    submit: bool = False  # the episode ends (after `command`, if there is one)
    feedback: str | None = None  # for the model, when the answer held no usable action
    tool_call_ids: list[str] = field(default_factory=list)  # native calls: each needs a tool message back


def final_answer(message: dict[str, Any]) -> str:
    """What the agent said in the message it submitted with, the DONE line and any code block left out:
    a question task's answer."""
    text = message.get("content") or ""
    text = _FENCE.sub("", text if isinstance(text, str) else "")
    return _DONE.sub("", text).strip()


def clean_command(text: str) -> str:
    """Forgive the usual junk around a command: `$ ` prompts (and the output lines shown after them),
    `sudo` (there is no root in the sandbox), blank lines around it."""
    lines = text.strip("\n").splitlines()
    prompted = [ln for ln in lines if ln.lstrip().startswith("$ ")]
    if prompted:
        lines = [ln.lstrip()[2:] for ln in prompted]
    lines = [_SUDO.sub(r"\1", ln.rstrip()) for ln in lines]
    return "\n".join(lines).strip()


def _python(code: str) -> str:
    return f"python3 - <<'APPLIANCE_PY'\n{code.strip()}\nAPPLIANCE_PY"


def _from_tool(name: str, arguments: Any) -> Action:
    name = (name or "").strip().lower()
    if name in SUBMIT_TOOLS:
        return Action(submit=True)
    if name not in BASH_TOOLS:
        return Action(feedback=f"There is no tool named {name!r}; the tools are bash and submit. {FORMAT_HINT}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # a bare string is the command itself
    if isinstance(arguments, dict):
        arguments = next((arguments[k] for k in ("command", "cmd", "script", "code", "input") if k in arguments),
                         next(iter(arguments.values()), "") if len(arguments) == 1 else "")
    command = clean_command(str(arguments or ""))
    if not command:
        return Action(feedback=f'The bash tool needs a command, e.g. {{"command": "ls"}}. {FORMAT_HINT}')
    if command.lower() in SUBMIT_COMMANDS:
        return Action(submit=True)
    return Action(command=command)


def _text_tool_call(raw: str) -> Action | None:
    try:
        calls = json.loads(raw.strip())
    except json.JSONDecodeError:
        return Action(feedback=f"Your <tool_call> is not valid JSON. {FORMAT_HINT}")
    call = calls[0] if isinstance(calls, list) and calls else calls
    if not isinstance(call, dict):
        return None
    return _from_tool(str(call.get("name", "")), call.get("arguments", call.get("parameters", {})))


def parse_action(message: dict[str, Any]) -> Action:
    """The action in an assistant message (`content` and optional OpenAI `tool_calls`)."""
    content = message.get("content") or ""
    tool_calls = message.get("tool_calls") or []
    if tool_calls:
        ids = [c.get("id") or f"call_{i}" for i, c in enumerate(tool_calls)]
        fn = tool_calls[0].get("function") or {}
        action = _from_tool(fn.get("name", ""), fn.get("arguments", ""))
        return Action(action.command, action.submit, action.feedback, ids)

    # `done` closing a shell loop inside a code block is not the agent saying it has finished
    done = bool(_DONE.search(_TOOL_CALL_TEXT.sub("", _FENCE.sub("", content))))
    for match in _TOOL_CALL_TEXT.finditer(content):
        call = _text_tool_call(match.group(1))
        if call is not None:
            return Action(call.command, call.submit or done, call.feedback)

    command = None
    for lang, body in _FENCE.findall(content):
        lang = lang.lower()
        if lang in SHELL_LANGS and (cleaned := clean_command(body)):
            command = cleaned
            break
        if lang in PYTHON_LANGS and body.strip():
            command = _python(body)
            break
    if command is None and "```" not in content:
        prompted = [ln for ln in content.splitlines() if ln.lstrip().startswith("$ ")]
        command = clean_command("\n".join(prompted)) or None
    if command is not None and command.lower() in SUBMIT_COMMANDS:
        return Action(submit=True)
    if command is not None or done:
        return Action(command=command, submit=done)
    return Action(feedback=f"No command found in your answer. {FORMAT_HINT}")


def truncate(text: str, limit: int) -> str:
    """Keep the head and the tail (where errors and results usually are) with a marker between."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[-tail:]}"


def observed_exit_code(observation: str) -> int | None:
    """The exit code an observation of `format_observation` reports; None for any other text."""
    m = re.search(r"^exit code (-?\d+)$", observation[:400], re.M)
    return int(m.group(1)) if m else None


def format_observation(result: Any, limit: int, timeout: float | None = None) -> str:
    """What the model sees after a command: exit code, stdout, stderr, and why it stopped if it timed out."""
    parts = []
    if result.timed_out:
        after = f" after {timeout:g} s" if timeout else ""
        parts.append(f"The command timed out{after} and was killed.")
    parts.append(f"exit code {result.exit_code}")
    out, err = result.stdout.rstrip("\n"), result.stderr.rstrip("\n")
    if out:
        parts.append(out)
    if err:
        parts.append(f"stderr:\n{err}")
    if not out and not err:
        parts.append("(no output)")
    return truncate("\n".join(parts), limit)
