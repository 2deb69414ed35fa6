"""Issue 27: workspaces arrive byte-for-byte at /workspace whatever their size, through validation, a rollout
and its verification (above ~900 KB they used to arrive nested as /workspace/workspace/...)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.practice import Practice, new_rollout, run_rollout
from appliance.sandbox import SandboxPool
from appliance.schemas import Outcome
from appliance.store import Store
from appliance.tasks import TaskSpec, validate_agent_free
from appliance.testing import ScriptedPolicy

pytestmark = pytest.mark.slow  # real Podman


def big_text(megabytes: float) -> str:
    line = "".join(chr(97 + i % 26) for i in range(63)) + "\n"
    n = int(megabytes * (1 << 20)) // len(line)
    return "".join(f"{i:08d}{line[8:]}" for i in range(n))


def sized_task(megabytes: float) -> TaskSpec:
    text = big_text(megabytes)
    digest = hashlib.sha256(text.encode()).hexdigest()
    verify = ("import hashlib, os, sys\n"
              f"ok = hashlib.sha256(open('data/big.txt', 'rb').read()).hexdigest() == {digest!r}\n"
              "sys.exit(0 if ok and os.path.exists('done.txt') and not os.path.exists('workspace') else 1)\n")
    return TaskSpec(id=f"size-{megabytes:g}", family="files", difficulty=1, instruction="Create done.txt.",
                    files={"data/big.txt": text}, verify=verify, verify_lang="python", solution="touch done.txt\n")


@pytest.mark.parametrize("megabytes", [0.3, 1, 3, 50])
def test_a_workspace_of_any_size_arrives_as_written(sandbox_settings: Settings, tmp_path: Path,
                                                    megabytes: float) -> None:
    spec = sized_task(megabytes)
    validation = validate_agent_free(sandbox_settings, spec)
    assert validation.ok, validation.reason
    store = Store(tmp_path / "p.db")
    practice = Practice(sandbox_settings, store, "127.0.0.1", 9, SandboxPool(sandbox_settings, 1, sweep_orphans=False))
    try:
        for command, outcome in (("touch done.txt", Outcome.SUCCESS), ("ls", Outcome.FAILURE)):
            practice.client_transport = ScriptedPolicy([f"```bash\n{command}\n```", "DONE"]).transport
            r = run_rollout(practice, spec,
                            new_rollout(store, harness="builtin", policy_version=0, group_id="g")).rollout
            assert r.outcome == outcome, r.error
    finally:
        store.close()
