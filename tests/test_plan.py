"""`appliance plan`: the memory arithmetic against published shapes and hand-worked figures, its refusals,
the command, and docs/DEPLOYMENT.md's generated tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.plan import PlanError, make_plan, read_model, tensor_parallel_sizes

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "model_configs"
sys.path.insert(0, str(REPO / "scripts"))
import plan_table  # noqa: E402


@pytest.mark.parametrize("name, params", [
    # the parameter counts the model cards publish
    ("qwen2.5-0.5b", 494_032_768), ("qwen2.5-1.5b", 1_543_714_304), ("qwen2.5-7b", 7_615_616_512),
    ("llama-3.1-8b", 8_030_261_248),
])
def test_parameter_count_matches_the_published_models(name: str, params: int) -> None:
    assert read_model(FIXTURES / name).params == params


def test_figures_match_hand_worked_arithmetic() -> None:
    p = make_plan(read_model(FIXTURES / "qwen2.5-0.5b"), plan_table.settings(False), 1, 80)
    assert p.kv_per_token_kib == 12  # 2 x 24 layers x 2 KV heads x 64 x 2 B
    assert round(p.logits_per_sample_gb, 2) == round(8192 * 151936 * 6 / 1e9, 2)  # 7.47 GB
    # 0.45 x 80 - 2 GB reserve - 0.99 GB weights, over 8192 tokens x 12 KiB
    assert p.rollouts_fit == int((0.45 * 80 - 2 - 494_032_768 * 2 / 1e9) * 1e9 // (8192 * 12288))
    full = make_plan(read_model(FIXTURES / "qwen2.5-0.5b"), plan_table.settings(True), 1, 80)
    assert full.states_gb == pytest.approx(494_032_768 * 8 / 1e9)  # bf16 weights, grads, two AdamW moments
    assert (p.sleep_level, full.sleep_level) == (1, 2)
    assert 8.0 < p.trained_params_m < 9.5  # LoRA r=16 on all seven projections of Qwen2.5-0.5B: ~8.8M


def test_tensor_parallel_takes_all_gpus_only_where_the_shapes_divide() -> None:
    assert tensor_parallel_sizes(read_model(FIXTURES / "qwen2.5-7b"), 8) == [1, 2, 4]  # 28 heads
    assert tensor_parallel_sizes(read_model(FIXTURES / "llama-3.1-8b"), 8)[-1] == 8
    p = make_plan(read_model(FIXTURES / "qwen2.5-7b"), plan_table.settings(False), 8, 80)
    assert p.tensor_parallel_size == 4 and p.processes == 8 and p.gpu_memory_utilization == 0.85
    assert any("28 attention heads" in n for n in p.notes)


def test_refuses_what_cannot_fit_with_the_reason() -> None:
    with pytest.raises(PlanError, match="does not fit for training") as e:
        make_plan(read_model(FIXTURES / "llama-3.1-8b"), plan_table.settings(True), 8, 80)
    assert "full_finetune = false" in e.value.hint
    with pytest.raises(PlanError, match="does not fit for serving"):
        make_plan(read_model(FIXTURES / "qwen2.5-7b"), plan_table.settings(False), 1, 24)
    with pytest.raises(PlanError, match="no config.json"):
        read_model(FIXTURES)


def test_deployment_doc_shows_the_generated_tables() -> None:
    text = plan_table.DOC.read_text()
    assert plan_table.replace_block(text, plan_table.tables()) == text, "run scripts/plan_table.py --write"


def test_plan_command(tmp_path: Path) -> None:
    env = {"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PROFILE": "gpu", "PATH": str(tmp_path)}  # no nvidia-smi
    model = str(FIXTURES / "qwen2.5-1.5b")
    r = CliRunner().invoke(main, ["plan", "--model", model, "--gpus", "8", "--gpu-memory", "141", "--json"], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["tensor_parallel_size"] == 4
    r = CliRunner().invoke(main, ["plan", "--model", model], env=env)
    assert r.exit_code == 1 and "no GPU visible" in r.output and "--gpus N --gpu-memory GB" in r.output


class _Started(Exception):
    pass


def _engine_settings_of_a_run(monkeypatch, env: dict[str, str], model: str, gpus: tuple[int, float]):
    """The settings the run's engine is built with (app.engine_and_proxy, which `appliance run` and `serve`
    start), on a faked GPU inventory; no engine starts."""
    import appliance.plan
    import appliance.serving
    from appliance.app import engine_and_proxy
    from appliance.config import load_settings

    seen = []

    class Engine:
        base_url = "http://engine.invalid"

        def __init__(self, settings, store, *args, **kwargs):
            seen.append(settings)

        def start(self):
            raise _Started

        def stop(self):
            pass

    monkeypatch.setattr(appliance.serving, "Engine", Engine)
    monkeypatch.setattr(appliance.plan, "detect_gpus", lambda: gpus)
    settings = load_settings(environ={"APPLIANCE_PROFILE": "gpu", "APPLIANCE_ENGINE__MODEL": str(FIXTURES / model),
                                      **env})
    with pytest.raises(_Started), engine_and_proxy(settings, store=None, log=lambda _: None):
        pass
    return settings, seen[0]


@pytest.mark.parametrize("model, gpus, tp, utilization", [("qwen2.5-7b", 8, 4, 0.85), ("llama-3.1-8b", 8, 8, 0.85),
                                                          ("qwen2.5-1.5b", 1, 1, 0.45)])
def test_a_gpu_run_serves_with_the_plans_engine_settings(monkeypatch, tmp_path, model, gpus, tp, utilization):
    # training.processes = 0 (the gpu profile): one trainer per GPU, which exit after LEARN; serving spans them
    settings, used = _engine_settings_of_a_run(monkeypatch, {"APPLIANCE_HOME": str(tmp_path)}, model, (gpus, 80.0))
    plan = make_plan(read_model(FIXTURES / model), settings, gpus, 80.0)  # what `appliance plan` prints
    assert (plan.tensor_parallel_size, plan.gpu_memory_utilization) == (tp, utilization)
    e = used.engine
    assert (e.tensor_parallel_size, e.gpu_memory_utilization, e.sleep_level) == \
        (plan.tensor_parallel_size, plan.gpu_memory_utilization, plan.sleep_level)
    assert used.training.micro_batch_size == plan.micro_batch_size


def test_the_plan_leaves_what_the_settings_name(monkeypatch, tmp_path):
    env = {"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__TENSOR_PARALLEL_SIZE": "2",
           "APPLIANCE_TRAINING__FULL_FINETUNE": "true"}
    _, used = _engine_settings_of_a_run(monkeypatch, env, "qwen2.5-1.5b", (8, 80.0))
    assert (used.engine.tensor_parallel_size, used.engine.gpu_memory_utilization) == (2, 0.85)
    assert used.engine.sleep_level == 2  # a full fine-tune loads new weights on every wake anyway
    # no GPU visible: nothing to plan for (the engine's start says what is wrong)
    _, used = _engine_settings_of_a_run(monkeypatch, {"APPLIANCE_HOME": str(tmp_path)}, "qwen2.5-1.5b", None)
    assert (used.engine.tensor_parallel_size, used.engine.gpu_memory_utilization) == (1, 0.45)
