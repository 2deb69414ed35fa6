"""Each API surface a tool-calling harness speaks, through the real proxy, in front of a scripted engine that
answers in the bundled family's tool-call form (`<tool_call>[...]</tool_call>`, parsed as vLLM's xlam
parser does): OpenAI chat completions with tools and parallel calls, Anthropic Messages with tool_use /
tool_result and count_tokens, the OpenAI Responses API; streamed and not.

For every surface: each call that reached the engine is one row whose ids are exactly what the engine saw
and sampled (the tool call's tokens included), and a turn that sends the call back with its result
extends the previous call's tokens, so the rollout is one branch and nothing is re-tokenized.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest

from appliance.config import load_settings
from appliance.proxy import ProxyServer, create_app, register_route
from appliance.schemas import ModelCall, Rollout, RolloutStatus
from appliance.store import Store
from appliance.testing.policy import Reply
from appliance.testing.tool_engine import ToolEngine
from appliance.trajectories import build_samples, build_tree

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                        "required": ["cmd"]}}}
WRITE = {"type": "function", "function": {"name": "write", "description": "Write a file.",
                                          "parameters": {"type": "object", "properties": {
                                              "path": {"type": "string"}, "text": {"type": "string"}}}}}
SCRIPT = [Reply(tool_calls=[("write", {"path": "a.txt", "text": "hi"}), ("bash", {"cmd": "cat a.txt"})]),
          Reply(content="Done: a.txt says hi.", expect="hi")]


@dataclass
class Door:
    engine: ToolEngine
    store: Store
    rollout_id: str
    base: str  # Anthropic base URL; OpenAI's is base + "/v1"

    def rows(self) -> list[ModelCall]:
        return self.store.model_calls(self.rollout_id)

    def assert_exact(self) -> None:
        """Every row is what the engine saw and sampled, and the rollout is one branch with no re-tokenized
        token: the second turn's prompt extends the first call's prompt and sampled tool call."""
        self.engine.assert_done()
        rows = self.rows()
        assert [r.status for r in rows] == ["ok"] * len(self.engine.answered), [r.error for r in rows]
        for row, seen in zip(rows, self.engine.answered):
            assert row.prompt_ids == seen.prompt_ids and row.completion_ids == seen.completion_ids
            assert row.logprobs == [-0.5] * len(seen.completion_ids)
        tree = build_tree(rows)
        assert tree.divergences == [], tree.divergences
        samples, report = build_samples(rows, rollout_id=self.rollout_id, group_id=None)
        assert report.retokenized_tokens == 0 and len(samples) == 1
        assert report.sampled_tokens == sum(len(r.completion_ids) for r in rows) == sum(samples[0].mask)


@pytest.fixture
def door(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[callable]:
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), **getattr(request, "param", {})})
    store = Store(settings.db_path)
    servers: list[ProxyServer] = []

    def make(script: list[Reply | str]) -> Door:
        engine = ToolEngine(script)
        engine_server = ProxyServer(engine.app(), settings, port=0).start()
        proxy = ProxyServer(create_app(store, engine.serving(engine_server.url), settings), settings, port=0).start()
        servers.extend([engine_server, proxy])
        rid = f"tools-{uuid.uuid4().hex[:8]}"
        store.add_rollout(Rollout(rid, None, None, None, None, "test", 0, RolloutStatus.RUNNING, purpose="debug"))
        return Door(engine, store, rid, f"{proxy.url}/r/{register_route(store, rid)}")

    yield make
    for server in servers:
        server.stop()
    store.close()


def oai(door: Door) -> openai.OpenAI:
    return openai.OpenAI(base_url=door.base + "/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_with_parallel_tool_calls(door, stream: bool) -> None:
    d = door(SCRIPT)
    messages: list[dict] = [{"role": "system", "content": "You code."}, {"role": "user", "content": "Write a.txt."}]
    if stream:
        calls: dict[int, dict] = {}
        for chunk in oai(d).chat.completions.create(model="gpt-x", messages=messages, tools=[BASH, WRITE],
                                                    max_tokens=200, stream=True):
            for tc in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
                calls.setdefault(tc.index, {"id": tc.id, "type": "function",
                                            "function": {"name": tc.function.name, "arguments": ""}})
                calls[tc.index]["function"]["arguments"] += tc.function.arguments or ""
        tool_calls = [calls[i] for i in sorted(calls)]
    else:
        first = oai(d).chat.completions.create(model="gpt-x", messages=messages, tools=[BASH, WRITE], max_tokens=200)
        assert first.choices[0].finish_reason == "tool_calls"
        tool_calls = [c.model_dump(exclude_none=True) for c in first.choices[0].message.tool_calls]
    assert [c["function"]["name"] for c in tool_calls] == ["write", "bash"]
    messages += [{"role": "assistant", "content": None, "tool_calls": tool_calls},
                 {"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": "written"},
                 {"role": "tool", "tool_call_id": tool_calls[1]["id"], "content": "hi"}]
    last = oai(d).chat.completions.create(model="gpt-x", messages=messages, tools=[BASH, WRITE], max_tokens=200)
    assert last.choices[0].message.content == "Done: a.txt says hi."
    d.assert_exact()


ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in (BASH, WRITE)]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages_with_tool_use_and_tool_result(door, stream: bool) -> None:
    d = door(SCRIPT)
    client = anthropic.Anthropic(base_url=d.base, api_key="unused", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "Write a.txt."}]
    kwargs = {"model": "claude-any", "max_tokens": 200, "system": "You code.", "tools": ANTHROPIC_TOOLS}
    if stream:
        with client.messages.stream(messages=messages, **kwargs) as s:
            first = s.get_final_message()
    else:
        first = client.messages.create(messages=messages, **kwargs)
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("write", {"path": "a.txt", "text": "hi"}),
                                                 ("bash", {"cmd": "cat a.txt"})]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "written"},
                                              {"type": "tool_result", "tool_use_id": uses[1].id, "content": "hi"}]}]
    last = client.messages.create(messages=messages, **kwargs)
    assert last.content[0].text == "Done: a.txt says hi." and last.stop_reason == "end_turn"
    d.assert_exact()


def test_anthropic_count_tokens_is_the_engines_count_and_a_row_that_trains_nothing(door) -> None:
    d = door(SCRIPT[:1])
    client = anthropic.Anthropic(base_url=d.base, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Write a.txt."}]
    counted = client.messages.count_tokens(model="claude-any", system="You code.", messages=messages,
                                           tools=ANTHROPIC_TOOLS)
    client.messages.create(model="claude-any", max_tokens=200, system="You code.", messages=messages,
                           tools=ANTHROPIC_TOOLS)
    count_row, call_row = d.rows()
    # the count is the prompt the call then sent, by the engine's own template and tokenizer
    assert counted.input_tokens == len(d.engine.answered[0].prompt_ids) == len(count_row.prompt_ids)
    assert count_row.prompt_ids == call_row.prompt_ids
    assert count_row.status == "count" and count_row.completion_ids == [] and count_row.error is None
    samples, report = build_samples(d.rows(), rollout_id=d.rollout_id, group_id=None)
    assert len(samples) == 1 and report.sampled_tokens == len(call_row.completion_ids)


@pytest.mark.parametrize("stream", [False, True])
def test_responses_api_with_function_calls(door, stream: bool) -> None:
    d = door(SCRIPT)
    client = oai(d)
    tools = [{"type": "function", **t["function"]} for t in (BASH, WRITE)]
    items: list[dict] = [{"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "Write a.txt."}]}]
    kwargs = {"model": "gpt-5-codex", "instructions": "You code.", "tools": tools, "max_output_tokens": 200,
              "store": False}
    if stream:
        done = [e for e in client.responses.create(input=items, stream=True, **kwargs)
                if e.type == "response.completed"]
        first = done[0].response
    else:
        first = client.responses.create(input=items, **kwargs)
    calls = [o for o in first.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("write", {"path": "a.txt", "text": "hi"}), ("bash", {"cmd": "cat a.txt"})]
    items += [c.model_dump(exclude_none=True) for c in first.output]
    items += [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "written"},
              {"type": "function_call_output", "call_id": calls[1].call_id, "output": "hi"}]
    last = client.responses.create(input=items, **kwargs)
    assert last.output_text == "Done: a.txt says hi." and last.status == "completed"
    d.assert_exact()


def test_responses_refuses_what_the_door_cannot_serve(door) -> None:
    d = door(["hello"])
    client = oai(d)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="m", input="hi", previous_response_id="resp_1")
    # as Codex sends them: a hosted tool nothing here runs is left out, a namespace's tools are offered
    namespace = {"type": "namespace", "name": "agents", "description": "Sub-agents.",
                 "tools": [{"type": "function", **WRITE["function"]}]}
    client.responses.create(model="m", input="hi", tools=[{"type": "web_search"}, namespace])
    assert [r.status for r in d.rows()] == ["error", "ok"]
    assert [t["function"]["name"] for t in d.rows()[1].request["tools"]] == ["write"]


@pytest.mark.parametrize(("door", "status"), [({}, "side"), ({"APPLIANCE_PROXY__TRAIN_SIDE_CALLS": "true"}, "ok")],
                         indirect=["door"])
def test_a_side_call_is_its_own_row_and_not_trained_by_default(door, status: str) -> None:
    d = door(["Edit notes", SCRIPT[1]])
    title = [{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "Write a.txt."}]
    # the harness names its small model `side` for the title (the recipes configure it so)
    list(oai(d).chat.completions.create(model="side", messages=title, max_tokens=20, stream=True))
    oai(d).chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    side, work = d.rows()
    assert (side.status, work.status) == (status, "ok")
    assert side.completion_ids == d.engine.answered[0].completion_ids  # recorded exactly all the same
    samples, report = build_samples(d.rows(), rollout_id=d.rollout_id, group_id=None)
    trained = len(side.completion_ids) if status == "ok" else 0
    assert report.sampled_tokens == len(work.completion_ids) + trained and len(samples) == 1 + (status == "ok")


def test_a_re_serialized_echo_of_a_sampled_call_renders_as_sampled(door) -> None:
    """OpenCode's SDK sends the model's calls back with their arguments re-serialized compactly; the proxy
    puts back the text the engine sampled (the same JSON value), so the turn extends the one before."""
    d = door(SCRIPT)
    messages: list[dict] = [{"role": "user", "content": "Write a.txt."}]
    first = oai(d).chat.completions.create(model="m", messages=messages, tools=[BASH, WRITE], max_tokens=200)
    calls = [c.model_dump(exclude_none=True) for c in first.choices[0].message.tool_calls]
    for c in calls:
        c["function"]["arguments"] = json.dumps(json.loads(c["function"]["arguments"]), separators=(",", ":"))
    messages += [{"role": "assistant", "content": "", "tool_calls": calls},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "written"},
                 {"role": "tool", "tool_call_id": calls[1]["id"], "content": "hi"}]
    oai(d).chat.completions.create(model="m", messages=messages, tools=[BASH, WRITE], max_tokens=200)
    d.assert_exact()


def test_a_call_the_harness_changed_is_sent_as_the_harness_sent_it(door) -> None:
    d = door(SCRIPT)
    messages: list[dict] = [{"role": "user", "content": "Write a.txt."}]
    first = oai(d).chat.completions.create(model="m", messages=messages, tools=[BASH, WRITE], max_tokens=200)
    calls = [c.model_dump(exclude_none=True) for c in first.choices[0].message.tool_calls]
    calls[1]["function"]["arguments"] = json.dumps({"cmd": "cat a.txt", "timeout": 120})  # its tool's default
    messages += [{"role": "assistant", "content": "", "tool_calls": calls},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "written"},
                 {"role": "tool", "tool_call_id": calls[1]["id"], "content": "hi"}]
    oai(d).chat.completions.create(model="m", messages=messages, tools=[BASH, WRITE], max_tokens=200)
    sent = d.rows()[1].request["messages"][1]["tool_calls"][1]["function"]["arguments"]
    assert json.loads(sent) == {"cmd": "cat a.txt", "timeout": 120}
    assert len(build_tree(d.rows()).divergences) == 1  # a branch; what was sampled is trained once all the same
