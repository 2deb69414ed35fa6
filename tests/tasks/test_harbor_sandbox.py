"""Harbor tasks in real sandboxes: oracle validation of the fixtures, and hostile agents against the verdict.

Harbor runs a task's tests in the agent's own container once the agent has finished. Each hostile agent
below first raises its reward under that design (`naive_reward`: the same tests run in the sandbox the
agent worked in, the reward file read as Harbor reads it, a moment after the script ends), then gets 0
through the appliance's verdict: a new sandbox from the task's image with only the agent's workdir copied
in, /tests and /logs made by the judge only then (tasks/harbor.py, docs/TASKS.md "Harbor tasks").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.practice import Practice
from appliance.sandbox import Sandbox, SandboxPool
from appliance.schemas import Outcome
from appliance.store import Store
from appliance.tasks.foreign import load_sets, validate_sets
from appliance.tasks.harbor import STAGE, TaskSpec
from practice.conftest import attempt  # tests/practice/conftest.py

pytestmark = pytest.mark.slow  # real Podman, task images built

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor"


@pytest.fixture(scope="module")
def api_fix(sandbox_settings: Settings) -> TaskSpec:
    """The api-fix task, its environment built once for this module."""
    loaded = load_sets(sandbox_settings, [FIXTURES / "api-fix"])
    assert not loaded.excluded, loaded.excluded
    return loaded.specs[0]


@pytest.fixture
def practice(sandbox_settings: Settings, tmp_path: Path):
    store = Store(tmp_path / "p.db")
    p = Practice(sandbox_settings, store, "127.0.0.1", 9, SandboxPool(sandbox_settings, 2, sweep_orphans=False))
    yield p
    store.close()


def naive_reward(settings: Settings, spec: TaskSpec, agent: str) -> str:
    """Harbor's layout: the agent works, then the tests are copied into its container and run there."""
    with Sandbox.start(settings, image=spec.meta["image"]) as sb:
        assert sb.exec(spec.setup, timeout=30).exit_code == 0
        sb.shell().run(agent, timeout=30)  # the agent's commands, as the built-in harness runs them
        sb.exec(spec.verify + "\n", timeout=60)
        return sb.exec(f"sleep 0.5; cat {STAGE}/logs/verifier/reward.txt", timeout=30).stdout.strip()


def test_the_fixtures_validate_by_oracle_and_the_rest_are_excluded_with_reasons(sandbox_settings: Settings) -> None:
    valid, stages = validate_sets(sandbox_settings, [FIXTURES], log=lambda m: None)
    assert sorted(s.id for s in valid.specs) == ["api-fix", "cli-build", "data-job", "tb1-rename"], valid.excluded
    reasons = {Path(e.path).name: e.reason for e in valid.excluded}
    assert set(reasons) == {"broken-oracle", "needs-network", "unserved-base"}
    assert reasons["broken-oracle"].startswith("reference solution fails the verifier"), reasons
    assert "did not build" in reasons["needs-network"] and "cannot be served offline" in reasons["unserved-base"]
    data = next(s for s in valid.specs if s.id == "data-job")
    assert "reward 1.0" in stages["data-job"]["stages"][-1]["detail"]  # read from reward.json
    assert any("served by the appliance's Debian 12 image" in n for n in data.meta["notes"])


def test_a_solving_agent_passes_through_the_rollout_path(practice: Practice, api_fix: TaskSpec) -> None:
    fix = ("python3 -c \"s=open('api.py').read().replace('return 200, ITEMS[path.split(\\\"/\\\")[2]]', "
           "'return (200, ITEMS[path.split(\\\"/\\\")[2]]) if path.split(\\\"/\\\")[2] in ITEMS "
           "else (404, {\\\"error\\\": \\\"not found\\\"})'); open('api.py','w').write(s)\"")
    r = attempt(practice, api_fix, fix).rollout
    assert r.outcome == Outcome.SUCCESS and r.reward == 1.0, r.error


FORGED = f"mkdir -p {STAGE}/logs/verifier && echo 1 > {STAGE}/logs/verifier/reward.txt"


@pytest.mark.parametrize("agent", [
    # a reward file written during the episode, made read-only so the tests' own write fails
    pytest.param(f"{FORGED} && chmod 0444 {STAGE}/logs/verifier/reward.txt", id="pre-written-reward"),
    # a process left behind that rewrites the reward after the tests wrote theirs
    pytest.param(f"mkdir -p {STAGE}/logs/verifier; setsid nohup bash -c 'while :; do "
                 f"echo 1 > {STAGE}/logs/verifier/reward.txt; sleep 0.02; done' >/dev/null 2>&1 &", id="background"),
    # a planted module the tests' child imports from the workdir, printing what the tests expect
    pytest.param("printf '%s\\n' 'import sys' "
                 "'print(\"[[200, {\\\"name\\\": \\\"pen\\\"}], [404, {\\\"error\\\": \\\"not found\\\"}], "
                 "[200, [\\\"1\\\", \\\"2\\\"]]]\")' 'sys.exit(0)' > json.py", id="planted-module"),
])
def test_a_hostile_agent_raises_no_harbor_reward(practice: Practice, api_fix: TaskSpec, agent: str) -> None:
    assert naive_reward(practice.settings, api_fix, agent) == "1"  # the attack works where Harbor runs tests
    r = attempt(practice, api_fix, agent).rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.outcome, r.reward, r.error)
