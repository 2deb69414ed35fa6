"""A tool harness and the served context (issue 48): a harness whose first prompt cannot fit is refused before
its rollout; one that outgrows the context after working turns overflowed on its own (truncated, the agent's),
not an infra error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.errors import ConfigError, SandboxError
from appliance.harness.base import EndReason
from appliance.harness.external import fit_context
from appliance.practice import _Infra, external_episode
from appliance.sandbox import Sandbox, SandboxPool
from appliance.schemas import ModelCall

TOO_LONG = ('engine answered 400: {"error":{"message":"This model\'s maximum context length is 8192 tokens. However, '
            'your prompt contains at least 8193 input tokens, which exceeds this limit even without any output '
            'tokens.","type":"BadRequestError"}}')


def row(seq: int, status: str, error: str | None = None) -> ModelCall:
    return ModelCall(None, "r", seq, status, {}, None, [1], [2] if status == "ok" else [], [], 0, 0.1, error)


def test_a_context_400_after_working_turns_is_the_agents_overflow_not_infra():
    calls = [row(0, "ok"), row(1, "side"), row(2, "ok"), row(3, "error", TOO_LONG)]
    episode = external_episode(1, False, 2, "Error: maximum context length", calls)
    assert episode.end_reason == EndReason.CONTEXT_OVERFLOW and not episode.infra_error


def test_a_first_prompt_over_the_context_is_infra_naming_the_setting():
    with pytest.raises(_Infra, match="first prompt.*engine.max_model_len"):
        external_episode(1, False, 0, "", [row(0, "error", TOO_LONG)])
    # a crash after another refusal stays the harness's crash
    with pytest.raises(_Infra, match="harness exited 1 after 1 model call"):
        external_episode(1, False, 1, "", [row(0, "ok"), row(1, "error", "engine answered 400: bad tool_choice")])


def bundled_like(tmp_path: Path, context: int) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"max_position_embeddings": context}))
    return tmp_path / "model"


def test_appliance_rollout_serves_the_context_a_harness_declares_where_the_model_has_it(tmp_path: Path):
    # every tool harness ended infra_error with the bundled model: its first prompt outgrew the 4096 served
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path),
                                      "APPLIANCE_ENGINE__MODEL": str(bundled_like(tmp_path, 8192))})
    assert settings.engine.max_model_len == 4096
    for name in ("opencode", "claude-code", "codex"):
        need = settings.harnesses[name].context_tokens
        assert need > 4096
        assert fit_context(settings, name, log=lambda _: None).engine.max_model_len == need
    assert fit_context(settings, "mini-swe-agent", log=lambda _: None) is settings  # no claim


def test_a_harness_the_model_cannot_serve_is_refused_before_the_rollout_naming_the_numbers(tmp_path: Path):
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path),
                                      "APPLIANCE_ENGINE__MODEL": str(bundled_like(tmp_path, 2048))})
    with pytest.raises(ConfigError, match="needs a served context of 8192 tokens.*max_model_len is 4096.*own "
                                          "context is 2048") as e:
        fit_context(settings, "codex", log=lambda _: None)
    assert "[harnesses.codex]" in e.value.hint


def test_practising_with_a_harness_over_the_served_context_is_refused_when_the_settings_load(tmp_path: Path):
    env = {"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_LOOP__HARNESS": "opencode"}
    with pytest.raises(ConfigError, match="needs a served context of 8192.*max_model_len is 4096"):
        load_settings(environ=env)
    assert load_settings(environ={**env, "APPLIANCE_ENGINE__MAX_MODEL_LEN": "8192"}).loop.harness == "opencode"


def test_a_harness_declares_the_sandbox_memory_its_program_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    assert settings.harnesses["opencode"].memory == "1g" and settings.sandbox.memory == "512m"
    seen: list[tuple[str, str | None]] = []

    def run(sb: Sandbox, ref: str, labels: object) -> None:
        seen.append((sb.settings.sandbox.memory, sb.settings.sandbox.workspace_size))
        raise SandboxError("stop here")

    monkeypatch.setattr(Sandbox, "_run", run)
    pool = SandboxPool(settings, sweep_orphans=False)
    for memory in ("1g", None, "256m"):
        with pytest.raises(SandboxError):
            pool.start(memory=memory)
    quarter = str(512 * 2**20 // 4)  # the workspace keeps its usual cap: the verifier can take it back
    assert seen == [("1g", quarter), ("512m", None), ("512m", None)]


@pytest.mark.parametrize("response", [
    {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []},  # Responses
    {"choices": [{"finish_reason": "length", "message": {"content": "zzz"}}]},  # chat completions
    {"stop_reason": "max_tokens", "content": [{"type": "text", "text": "zzz"}]},  # Anthropic Messages
])
def test_a_harness_that_gives_up_on_an_answer_cut_at_max_tokens_ran_out_of_tokens_not_infra(response) -> None:
    # seen with the bundled model: Codex exits 1 on 'Incomplete response returned, reason: max_output_tokens'
    cut = ModelCall(None, "r", 0, "ok", {}, response, [1], [2] * 256, [-0.1] * 256, 0, 300.0)
    episode = external_episode(1, False, 1, "ERROR: Incomplete response returned, reason: max_output_tokens", [cut])
    assert episode.end_reason == EndReason.TOKEN_LIMIT and not episode.infra_error
    done = ModelCall(None, "r", 0, "ok", {}, {"choices": [{"finish_reason": "stop", "message": {}}]}, [1], [2], [-0.1],
                     0, 1.0)
    with pytest.raises(_Infra, match="harness exited 1"):  # a crash after a complete answer stays the harness's
        external_episode(1, False, 1, "", [done])
