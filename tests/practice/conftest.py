"""Shared by the practice tests that drive one rollout with a scripted policy in real sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.practice import Practice, RolloutResult, new_rollout, run_rollout
from appliance.sandbox import SandboxPool
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.testing import ScriptedPolicy


@pytest.fixture
def practice(sandbox_settings: Settings, tmp_path: Path):
    store = Store(tmp_path / "p.db")
    p = Practice(sandbox_settings, store, "127.0.0.1", 9, SandboxPool(sandbox_settings, 2, sweep_orphans=False))
    yield p
    store.close()


def attempt(practice: Practice, spec: TaskSpec, command: str) -> RolloutResult:
    """One rollout of the built-in harness whose policy runs `command`, then says DONE."""
    policy = ScriptedPolicy([f"```bash\n{command}\n```", "DONE"])
    practice.client_transport = policy.transport
    return run_rollout(practice, spec, new_rollout(practice.store, harness="builtin", policy_version=0, group_id="g"))
