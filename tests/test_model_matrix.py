"""The model matrix: a tiny random model of each family a user brings (Qwen2.5, Qwen3, Llama 3.1, Gemma 3, Phi 3.5),
with that family's special tokens and its real chat template (TRL's copy), through a whole `appliance run` on the
cpu profile: the CPU vLLM serves it, demonstrations are made with its template, practice records its exact tokens,
LEARN trains (SFT on the demonstrations, the RL step on practice), the canary checks the synced weights, the
trained version is published and `appliance export` writes it. LoRA and full fine-tune both appear.

The run is tests/small_run.py's (one family, two tasks, one training step): about four minutes a case on two
cores, so the matrix is five cases, not ten: every family once, three with a LoRA adapter and two in full (a
sixth, Qwen2.5 in full, passed too but CI's 90 minutes have little room)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.schemas import IterationStatus, RolloutStatus, RunStatus
from appliance.store import Store
from small_run import REPO, small_run_env  # tests/small_run.py
from tiny_model import FAMILIES, make_family_model  # tests/tiny_model.py

pytestmark = pytest.mark.slow

CASES = [("qwen2_5", "lora"), ("qwen3", "lora"), ("llama3_1", "full"), ("gemma3", "full"), ("phi3_5", "lora")]


def appliance(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / ".venv/bin/appliance"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(("family", "mode"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_a_family_model_runs_the_whole_loop(sandbox_settings: Settings, tmp_path: Path, family: str,
                                            mode: str) -> None:
    bundled = load_settings().model_path
    if not (bundled / "tokenizer.json").exists():
        pytest.skip(f"the bundled model is not converted at {bundled}: run scripts/setup")
    model = make_family_model(tmp_path / family, FAMILIES[family], bundled)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env |= small_run_env(sandbox_settings, home, model) | {
        "APPLIANCE_TRAINING__FULL_FINETUNE": "true" if mode == "full" else "false",
        # a LoRA adapter at the bundled model's learning rate moves a random model too little to matter here;
        # what is checked is that it trains, syncs, passes the canary and exports
        "APPLIANCE_TRAINING__LORA_RANK": "8",
    }
    done = appliance(env, "run", "--iterations", "1", "--headless", timeout=1200)
    log = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, log

    settings = load_settings(environ=env)
    store = Store(settings.db_path)
    run = store.latest_run()
    assert run is not None and run.status == RunStatus.DONE, log
    assert [(i.index, i.status) for i in store.iterations(run.id)] == [(0, IterationStatus.DONE),
                                                                         (1, IterationStatus.DONE)]
    events = store.events(run.id, limit=10_000)
    errors = [e.message for e in events if e.kind == "error"]
    assert not [m for m in errors if "template" in m or "training did not produce" in m], errors
    demos = store.demonstrations(run.id)
    assert demos, f"no demonstrations with {family}'s template; events: {[e.message for e in events][-30:]}"
    rollouts = [r for r in store.rollouts(run.id) if r.purpose == "train"]
    assert rollouts and all(r.status == RolloutStatus.FINISHED for r in rollouts)
    calls = [c for r in rollouts for c in store.model_calls(r.id) if c.status == "ok"]
    assert calls and all(c.prompt_ids and c.completion_ids for c in calls)  # the engine's exact tokens
    assert store.samples(rollouts[0].id), "practice made no training samples"
    (checkpoint,) = [c for c in store.checkpoints(run.id) if c.iteration == 1]
    assert checkpoint.kind == mode
    _, serving, _ = store.engine_state()
    assert serving == checkpoint.policy_version >= 1, "the trained version was not published (canary, sync)"
    assert not [e for e in events if "rolled back" in e.message], [e.message for e in events]

    exported = appliance(env, "export", str(tmp_path / "export"), "--json", timeout=600)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    result = json.loads(exported.stdout)
    assert result["version"] == checkpoint.policy_version
    assert (tmp_path / "export" / "chat_template.jinja").exists() or "chat_template" in json.loads(
        (tmp_path / "export" / "tokenizer_config.json").read_text())
