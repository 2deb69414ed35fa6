"""A LEARN phase against the real CPU vLLM engine: a GRPO step on engine-sampled tokens, synced and served."""

from __future__ import annotations

import uuid

import httpx
import pytest
from safetensors.torch import load_file

from appliance.schemas import Checkpoint, EngineState, Outcome, Rollout, RolloutStatus, Sample
from appliance.serving.engine import Weights
from appliance.training.learn import learn


def sample_group(engine, prompt: list[int], n: int) -> list[tuple[list[int], list[float]]]:
    out = []
    for seed in range(n):
        r = httpx.post(f"{engine.base_url}/v1/completions", timeout=60, json={
            "model": engine.model_name(), "prompt": prompt, "max_tokens": 12, "temperature": 1.0, "seed": seed,
            "logprobs": 1, "return_token_ids": True, "ignore_eos": True})
        r.raise_for_status()
        choice = r.json()["choices"][0]
        out.append((choice["token_ids"], choice["logprobs"]["token_logprobs"]))
    return out


@pytest.mark.slow
def test_grpo_step_on_engine_samples_is_synced_and_served(engine):
    # Train on top of whatever the session's engine serves now (other tests change its weights).
    weights = Weights.from_json(engine.store.engine_state()[2])
    settings = engine.settings.model_copy(deep=True)
    settings.engine.model = weights.full
    settings.training.learning_rate = 1e-2
    settings.training.method = "grpo"
    settings.training.full_finetune = False  # these check adapter folders; the cpu profile trains all weights
    run_id = f"learn-engine-{uuid.uuid4().hex[:8]}"
    if weights.lora is not None:
        engine.store.add_checkpoint(Checkpoint(run_id, engine.policy_version, None, "lora", str(weights.lora)))

    prompt = engine.canary_prompt()
    rollouts, samples = [], []
    for i, (ids, logprobs) in enumerate(sample_group(engine, prompt, 4)):
        rid = f"{run_id}-{i}"
        reward = float(i % 2)
        rollouts.append(Rollout(rid, run_id, "t", "g", 0, "builtin", engine.policy_version, RolloutStatus.FINISHED,
                                outcome=Outcome.SUCCESS if reward else Outcome.FAILURE, reward=reward))
        samples.append(Sample(rid, "g", 0, prompt + ids, [0] * len(prompt) + [1] * len(ids),
                              [0.0] * len(prompt) + logprobs, engine.policy_version))

    version = engine.policy_version
    result = learn(engine.store, settings, engine, rollouts, samples, run_id=run_id, iteration=0)

    step = result.steps[-1]
    assert step["logprob_gap_mean"] < 1e-3  # fp32 serving reproduces the trainer's logprobs
    assert step["trained_tokens"] == 4 * 12
    assert result.policy_version == version + 1 == engine.policy_version
    assert engine.state == EngineState.SERVING  # the canary against the trainer's weights passed
    assert engine.model_name() == f"{settings.engine.served_model_name}-v{result.policy_version}"
    adapter = load_file(f"{result.checkpoint.path}/adapter_model.safetensors")
    if weights.lora is None:  # a fresh adapter starts with B = 0: a non-zero B is the step's doing
        assert any(t.abs().sum() > 0 for name, t in adapter.items() if "lora_B" in name)
    assert engine.store.latest_checkpoint(run_id).path == result.checkpoint.path
