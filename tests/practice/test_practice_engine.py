"""Rollouts through the real proxy and the CPU vLLM engine (the session's tiny random model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.practice import Practice, new_rollout, run_rollout
from appliance.proxy import ProxyServer, create_app
from appliance.sandbox import SandboxPool
from appliance.schemas import Outcome
from appliance.store import Store
from appliance.tasks import TaskSpec

pytestmark = pytest.mark.slow

HELLO = TaskSpec(id="hello-1", family="files", difficulty=1, instruction="Create hello.txt containing the word hi.",
                 verify="grep -qx hi hello.txt", solution="echo hi > hello.txt")


@pytest.fixture
def live_practice(sandbox_settings: Settings, engine, tmp_path: Path):
    settings = sandbox_settings.model_copy(deep=True)
    settings.harness.max_turns = 3
    settings.harness.max_tokens_per_call = 24
    store = Store(tmp_path / "live.db")
    server = ProxyServer(create_app(store, engine, settings), settings, port=0).start()
    yield Practice(settings, store, server.host, server.port, SandboxPool(settings, 2, sweep_orphans=False))
    server.stop()
    store.close()


def _check_exact_tokens(practice: Practice, rollout_id: str, result) -> None:
    calls = [c for c in practice.store.model_calls(rollout_id) if c.status == "ok"]
    assert calls, "no model call reached the engine"
    samples = practice.store.samples(rollout_id)
    sampled = [t for s in samples for t, m in zip(s.token_ids, s.mask) if m]
    assert len(sampled) == sum(len(c.completion_ids) for c in calls)
    assert result.trajectory.retokenized_tokens == 0
    for c in calls:
        assert len(c.completion_ids) == len(c.logprobs)


def test_builtin_harness_through_proxy_and_engine(live_practice: Practice) -> None:
    rollout = new_rollout(live_practice.store, harness="builtin", policy_version=0, group_id="g")
    result = run_rollout(live_practice, HELLO, rollout)
    r = result.rollout
    # a random tiny model does not solve the task, but everything around it must work
    assert r.outcome in (Outcome.FAILURE, Outcome.TRUNCATED), r.error
    _check_exact_tokens(live_practice, r.id, result)


def test_third_party_harness_runs_unmodified_through_the_door(live_practice: Practice) -> None:
    rollout = new_rollout(live_practice.store, harness="mini-swe-agent", policy_version=0, group_id="g")
    result = run_rollout(live_practice, HELLO, rollout)
    r = result.rollout
    assert r.outcome != Outcome.INFRA_ERROR, r.error
    _check_exact_tokens(live_practice, r.id, result)
