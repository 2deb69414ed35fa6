from pathlib import Path

import pytest

from appliance.config import describe_fields, load_settings
from appliance.errors import ConfigError


def test_defaults_follow_the_profile(tmp_path: Path) -> None:
    cpu = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    gpu = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PROFILE": "gpu"})
    assert cpu.profile == "cpu" and cpu.engine.dtype == "float32" and not cpu.engine.enable_sleep_mode
    assert gpu.engine.dtype == "bfloat16" and gpu.engine.enable_sleep_mode
    assert cpu.db_path == tmp_path / "appliance.db"


def test_the_cpu_profile_asks_the_bundled_model_for_no_proposals_and_no_analysis(tmp_path: Path) -> None:
    """On the cpu profile they cost minutes an iteration and gave nothing (issue 49: the settings' help texts);
    the gpu profile keeps both, and a file turns them back on."""
    cpu = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    gpu = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PROFILE": "gpu"})
    assert (cpu.loop.propose, cpu.loop.analysis) == (0, False)
    assert (gpu.loop.propose, gpu.loop.analysis) == (8, True)
    (tmp_path / "appliance.toml").write_text("[loop]\npropose = 4\nanalysis = true\n")
    again = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    assert (again.loop.propose, again.loop.analysis, again.loop.compose) == (4, True, 2)


def test_a_harness_table_changes_its_entry_and_adds_beside_the_built_in_ones(tmp_path: Path) -> None:
    # a partial table replaced the built-in entry (recipe and command required), and a new one every default
    (tmp_path / "appliance.toml").write_text(
        '[harnesses.opencode]\ntimeout_s = 1800\n\n[harnesses.mine]\nrecipe = "/srv/mine"\n'
        'command = ["mine", "{instruction}"]\n')
    s = load_settings(environ={"APPLIANCE_HOME": str(tmp_path),
                               "APPLIANCE_HARNESSES__CODEX__TIMEOUT_S": "60"})
    assert {"mini-swe-agent", "opencode", "claude-code", "codex", "mine"} <= set(s.harnesses)
    assert s.harnesses["opencode"].timeout_s == 1800 and s.harnesses["opencode"].recipe == "opencode"
    assert s.harnesses["codex"].timeout_s == 60 and s.harnesses["codex"].recipe == "codex"
    assert s.harnesses["mine"].command == ["mine", "{instruction}"]


def test_an_environment_variable_reaches_a_built_in_harness_with_a_hyphen_in_its_name(tmp_path: Path) -> None:
    # a variable's name holds no hyphen: APPLIANCE_HARNESSES__CLAUDE_CODE__TIMEOUT_S made an entry `claude_code`
    # (recipe and command required), and the settings failed to load
    s = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_HARNESSES__CLAUDE_CODE__TIMEOUT_S": "60"})
    assert s.harnesses["claude-code"].timeout_s == 60 and "claude_code" not in s.harnesses


def test_env_overrides_file_overrides_profile(tmp_path: Path) -> None:
    (tmp_path / "appliance.toml").write_text('profile = "gpu"\n[engine]\nport = 9001\ndtype = "float16"\n')
    s = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__PORT": "9002"})
    assert s.profile == "gpu"
    assert s.engine.port == 9002  # env beats file
    assert s.engine.dtype == "float16"  # file beats profile
    assert s.engine.enable_sleep_mode  # profile default


def test_explicit_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "other.toml"
    cfg.write_text("[sandbox]\nmax_concurrent = 3\n")
    assert load_settings(cfg, environ={"APPLIANCE_HOME": str(tmp_path)}).sandbox.max_concurrent == 3
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml", environ={})


def test_unknown_key_names_key_and_valid_choices(tmp_path: Path) -> None:
    (tmp_path / "appliance.toml").write_text("[engine]\nprot = 1\n")
    with pytest.raises(ConfigError) as e:
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    assert "engine.prot" in e.value.message
    assert "port" in e.value.hint


def test_bad_value_names_key_value_and_allowed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__DTYPE": "int3"})
    assert "engine.dtype" in e.value.message and "int3" in e.value.message
    assert "float32" in e.value.message  # the allowed literals
    with pytest.raises(ConfigError, match="sandbox.pids_limit"):
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_SANDBOX__PIDS_LIMIT": "-4"})


def test_unknown_profile_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown profile 'tpu'"):
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PROFILE": "tpu"})
    (tmp_path / "appliance.toml").write_text("[engine\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})


def test_unknown_env_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__NOPE": "1"})


def test_every_field_has_help() -> None:
    rows = describe_fields()
    assert len(rows) > 20
    assert all(help_text for _, _, help_text in rows), [k for k, _, h in rows if not h]


def test_loading_does_not_leak_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_ENGINE__PORT", "9100")
    s = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    assert s.engine.port == 8100
    import os

    assert os.environ["APPLIANCE_ENGINE__PORT"] == "9100"


def test_a_renamed_key_names_its_new_name(tmp_path: Path) -> None:
    (tmp_path / "appliance.toml").write_text("[sandbox]\ncommand_timeout_s = 30\n")
    with pytest.raises(ConfigError, match=r"'sandbox.command_timeout_s' .* is now sandbox.exec_timeout_s") as e:
        load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    assert "harness.command_timeout_s" in e.value.message
