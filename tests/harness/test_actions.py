"""The forgiving action parser and the observation formatter of the built-in harness."""

from __future__ import annotations

import json

import pytest

from appliance.harness.actions import FORMAT_HINT, clean_command, format_observation, parse_action, truncate
from appliance.testing import FakeResult


def text(content: str):
    return parse_action({"role": "assistant", "content": content})


def tool(name: str, arguments, *ids: str):
    calls = [{"id": i, "type": "function", "function": {"name": name, "arguments": arguments}} for i in ids or ("c1",)]
    return parse_action({"role": "assistant", "content": None, "tool_calls": calls})


@pytest.mark.parametrize("content, command", [
    ("```bash\nls -la\n```", "ls -la"),
    ("Sure! Let me look.\n```sh\ncat notes.txt\n```\nThis prints the file.", "cat notes.txt"),
    ("```\nwc -l data.txt\n```", "wc -l data.txt"),
    ("```console\n$ echo hi > a.txt\n$ cat a.txt\nhi\n```", "echo hi > a.txt\ncat a.txt"),  # output lines dropped
    ("```bash\nsudo chmod +x run.sh && sudo -E ./run.sh\n```", "chmod +x run.sh && ./run.sh"),
    ("```bash\n\n  \nmkdir out\n\n```", "mkdir out"),
    ("First run this:\n$ sort names.txt > sorted.txt", "sort names.txt > sorted.txt"),
    ("```bash\nls\n", "ls"),  # the answer hit max_tokens before the closing fence
    ("```json\n{}\n```\n```bash\npwd\n```", "pwd"),  # not a shell block: skipped
    ("```bash\nfor f in *.txt; do\n  echo $f\ndone\n```", "for f in *.txt; do\n  echo $f\ndone"),
])
def test_fenced_and_prompted_commands_are_found_and_cleaned(content, command):
    action = text(content)
    assert action.command == command and not action.submit and action.feedback is None


def test_python_block_runs_with_python3():
    action = text("```python\nprint(1 + 1)\n```")
    assert action.command == "python3 - <<'APPLIANCE_PY'\nprint(1 + 1)\nAPPLIANCE_PY"


@pytest.mark.parametrize("content", ["DONE", "All files are in place.\n\nDONE.", "**Done**", "```bash\nsubmit\n```"])
def test_done_submits(content):
    action = text(content)
    assert action.submit and action.command is None and action.feedback is None


def test_command_and_done_runs_the_command_then_submits():
    action = text("```bash\necho 3 > count.txt\n```\nDONE")
    assert action.command == "echo 3 > count.txt" and action.submit


@pytest.mark.parametrize("content", ["I would use the ls command to list the files.", "", "```bash\n\n```"])
def test_no_command_gives_feedback_with_the_format(content):
    action = text(content)
    assert action.command is None and not action.submit and FORMAT_HINT in action.feedback


def test_native_tool_calls():
    assert tool("bash", json.dumps({"command": "ls"})).command == "ls"
    assert tool("bash", {"cmd": "$ sudo ls /"}).command == "ls /"  # arguments as a dict, forgivingly cleaned
    assert tool("bash", "cat a.txt").command == "cat a.txt"  # not JSON: the string is the command
    assert tool("submit", "{}").submit
    assert tool("bash", json.dumps({"command": "ls"}), "a", "b").tool_call_ids == ["a", "b"]
    unknown = tool("python", "{}")
    assert unknown.command is None and "bash and submit" in unknown.feedback
    assert "needs a command" in tool("bash", "{}").feedback


def test_tool_call_written_as_text():
    action = text('<tool_call>[{"name": "bash", "arguments": {"command": "ls -1"}}]</tool_call>')
    assert action.command == "ls -1" and action.tool_call_ids == []
    assert "not valid JSON" in text('<tool_call>[{"name": "bash", </tool_call>').feedback
    assert text('<tool_call>{"name": "submit", "arguments": {}}</tool_call>').submit


def test_clean_command_leaves_clean_commands_alone():
    assert clean_command("grep -c x a.txt | sort > b") == "grep -c x a.txt | sort > b"


def test_truncate_keeps_head_and_tail():
    out = truncate("A" * 50 + "B" * 50, 20)
    assert out.startswith("A" * 10) and out.endswith("B" * 10) and "[... 80 characters omitted ...]" in out
    assert truncate("short", 20) == "short"


def test_observation():
    assert format_observation(FakeResult(0), 100) == "exit code 0\n(no output)"
    obs = format_observation(FakeResult(1, "out\n", "err\n"), 100)
    assert obs == "exit code 1\nout\nstderr:\nerr"
    timed = format_observation(FakeResult(137, timed_out=True), 100, 5)
    assert timed.startswith("The command timed out after 5 s and was killed.")
    long = format_observation(FakeResult(0, "x" * 5000 + "END"), 300)
    assert len(long) < 400 and long.endswith("END") and "omitted" in long
