"""Real tool-calling harnesses, unmodified, in a real sandbox, through the model door and the real proxy, in front
of a scripted engine that answers in the bundled family's tool-call form (`<tool_call>[...]</tool_call>`, read as
vLLM's xlam parser reads it): each completes a task end to end (reads and edits a file with its own tools, runs
a command and answers), and every call it made is recorded with the ids the engine saw and sampled.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.proxy import ProxyServer, create_app, register_route
from appliance.schemas import ModelCall, Rollout, RolloutStatus
from appliance.store import Store
from appliance.testing.policy import Reply
from appliance.testing.tool_engine import ToolEngine
from appliance.trajectories import build_samples

pytestmark = pytest.mark.slow  # real Podman, a harness image of a few hundred MB

TASK = "In notes.txt replace world by appliance, then show the file."


@dataclass
class Door:
    store: Store
    rollout_id: str
    token: str
    port: int

    def rows(self) -> list[ModelCall]:
        return self.store.model_calls(self.rollout_id)


@contextmanager
def door_to(engine: ToolEngine, settings: Settings) -> Iterator[Door]:
    store = Store(settings.db_path)
    with ProxyServer(engine.app(), settings, port=0) as engine_server, \
            ProxyServer(create_app(store, engine.serving(engine_server.url), settings), settings, port=0) as proxy:
        rid = f"harness-{uuid.uuid4().hex[:8]}"
        store.add_rollout(Rollout(rid, None, None, None, None, "test", 0, RolloutStatus.RUNNING, purpose="debug"))
        yield Door(store, rid, register_route(store, rid), proxy.port)
    store.close()


def run_in_sandbox(settings: Settings, name: str, engine: ToolEngine, tmp_path: Path) -> tuple[object, str, Door]:
    from appliance.harness.external import harness_image, run_external
    from appliance.sandbox import Sandbox
    from appliance.sandbox.door import ModelDoor

    t0 = time.monotonic()
    image = harness_image(settings, name, log=lambda _: None)
    print(f"{name}: image ready in {time.monotonic() - t0:.0f} s")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello world\n")
    with door_to(engine, settings) as door, \
            Sandbox.start(settings, workspace=workspace, image=image, door=ModelDoor("127.0.0.1", door.port)) as sb:
        t0 = time.monotonic()
        run = run_external(sb, settings.harnesses[name], instruction=TASK, token=door.token, max_turns=8,
                           command_timeout_s=30)
        print(f"{name}: episode in {time.monotonic() - t0:.0f} s")
        edited = sb.exec(["cat", "/workspace/notes.txt"], timeout=30).stdout
        return run, edited, door


@pytest.fixture
def harness_settings(sandbox_settings: Settings) -> Settings:
    settings = sandbox_settings.model_copy(deep=True)
    settings.sandbox.memory = "1g"  # a harness program and its runtime, beside the task's own processes
    return settings


def test_opencode_edits_a_file_and_runs_a_command(harness_settings: Settings, tmp_path: Path) -> None:
    engine = ToolEngine([
        Reply(tool_calls=[("read", {"filePath": "/workspace/notes.txt"})]),
        Reply(tool_calls=[("edit", {"filePath": "/workspace/notes.txt", "oldString": "world",
                                    "newString": "appliance"})], expect="hello world"),
        Reply(tool_calls=[("bash", {"command": "cat notes.txt", "description": "Show the file"})]),
        Reply(content="notes.txt now says hello appliance.", expect="hello appliance"),
    ], side={"title generator": "Edit notes"})
    run, edited, door = run_in_sandbox(harness_settings, "opencode", engine, tmp_path)
    assert run.exit_code == 0, (run.stdout[-2000:], run.stderr[-4000:], engine.failures)
    engine.assert_done()
    assert edited == "hello appliance\n"
    assert run.answer == "notes.txt now says hello appliance."
    assert_recorded(door, engine)
    samples, report = build_samples(door.rows(), rollout_id=door.rollout_id, group_id=None)
    # its SDK re-serializes the calls it sends back; the proxy restores the sampled text (proxy/calls.py),
    # so the episode is one sequence
    assert report.retokenized_tokens == 0 and report.divergences == [] and len(samples) == 1


def assert_recorded(door: Door, engine: ToolEngine) -> None:
    """Every call a row with the engine's ids; the harness's side calls `side` rows, out of training."""
    rows = door.rows()
    work = [r for r in rows if r.status == "ok"]
    side = [r for r in rows if r.status == "side"]
    assert (len(work), len(side)) == (len(engine.answered), len(engine.side_answered)) and \
        len(rows) == len(work) + len(side), [(r.status, r.error) for r in rows]
    for row, seen in [*zip(work, engine.answered), *zip(side, engine.side_answered)]:
        assert row.prompt_ids == seen.prompt_ids and row.completion_ids == seen.completion_ids
    samples, report = build_samples(rows, rollout_id=door.rollout_id, group_id=None)
    assert report.retokenized_tokens == 0
    assert report.sampled_tokens == sum(len(r.completion_ids) for r in work)


def test_claude_code_edits_a_file_and_runs_a_command(harness_settings: Settings, tmp_path: Path) -> None:
    engine = ToolEngine([
        Reply(tool_calls=[("Read", {"file_path": "/workspace/notes.txt"})]),
        Reply(tool_calls=[("Edit", {"file_path": "/workspace/notes.txt", "old_string": "world",
                                    "new_string": "appliance"})], expect="hello world"),
        Reply(tool_calls=[("Bash", {"command": "cat notes.txt", "description": "Show the file"})]),
        Reply(content="notes.txt now says hello appliance.", expect="hello appliance"),
    ])
    run, edited, door = run_in_sandbox(harness_settings, "claude-code", engine, tmp_path)
    assert run.exit_code == 0, (run.stdout[-2000:], run.stderr[-4000:], engine.failures)
    engine.assert_done()
    assert edited == "hello appliance\n"
    assert run.answer == "notes.txt now says hello appliance."
    assert_recorded(door, engine)
    samples, report = build_samples(door.rows(), rollout_id=door.rollout_id, group_id=None)
    assert report.retokenized_tokens == 0
    # a turn extends the one before unless the harness rewrote a call the model made (Claude Code adds its
    # tool's defaults to an Edit's input): then the turn starts a branch, and what was sampled is still
    # trained once, exactly, in the branch that sampled it
    assert len(report.divergences) == len(rewritten_calls(engine)), (report.divergences, rewritten_calls(engine))


def rewritten_calls(engine: ToolEngine) -> list[tuple[str, str]]:
    """(sampled arguments, arguments sent back) of each tool call a later request carried changed."""
    sampled: dict[str, str] = {}  # the engine's ids for its calls: chatcmpl-tool-<step><index>
    out = []
    for i, seen in enumerate(engine.answered):
        for m in seen.request["messages"]:
            for call in m.get("tool_calls") or ():
                was = sampled.get(call["id"])
                if was is not None and was != call["function"]["arguments"]:
                    out.append((was, call["function"]["arguments"]))
        reply = engine.script[i]
        for j, (_name, args) in enumerate(reply.tool_calls or ()):
            sampled[f"chatcmpl-tool-{i}{j}"] = args if isinstance(args, str) else json.dumps(args)
    return list(dict.fromkeys(out))


PATCH = """apply_patch <<'EOF'
*** Begin Patch
*** Update File: notes.txt
@@
-hello world
+hello appliance
*** End Patch
EOF"""


def test_codex_edits_a_file_and_runs_a_command(harness_settings: Settings, tmp_path: Path) -> None:
    engine = ToolEngine([
        Reply(tool_calls=[("exec_command", {"cmd": "cat notes.txt"})]),
        Reply(tool_calls=[("exec_command", {"cmd": PATCH})], expect="hello world"),  # its own edit tool
        Reply(tool_calls=[("exec_command", {"cmd": "cat notes.txt"})], expect="notes.txt"),
        Reply(content="notes.txt now says hello appliance.", expect="hello appliance"),
    ])
    run, edited, door = run_in_sandbox(harness_settings, "codex", engine, tmp_path)
    assert run.exit_code == 0, (run.stdout[-2000:], run.stderr[-4000:], engine.failures)
    engine.assert_done()
    assert edited == "hello appliance\n"
    assert run.answer == "notes.txt now says hello appliance."
    assert_recorded(door, engine)
    samples, report = build_samples(door.rows(), rollout_id=door.rollout_id, group_id=None)
    assert report.retokenized_tokens == 0 and report.divergences == [] and len(samples) == 1
