"""The third-party harness honours a task's limit of one command, as the built-in harness does: the adapter
hands it to the harness's command line (`{command_timeout_s}`), and mini-swe-agent, configured by default,
kills a command at that limit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.harness.external import run_external
from appliance.schemas import ExecResult


class RecordingSandbox:
    """Stands in for the sandbox: records the command line the adapter runs."""

    def __init__(self) -> None:
        self.argv: list[str] = []

    def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str = "/workspace",
             env: Mapping[str, str] | None = None) -> ExecResult:
        self.argv = list(cmd)
        return ExecResult(0, "", "", 0.1)


def test_the_default_mini_swe_agent_command_gets_the_tasks_command_limit(tmp_path: Path) -> None:
    spec = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)}).harnesses["mini-swe-agent"]
    sandbox = RecordingSandbox()
    run_external(sandbox, spec.model_copy(update={"answer": ""}), instruction="x", token="t",  # type: ignore[arg-type]
                 command_timeout_s=12.5)
    assert "environment.timeout=13" in sandbox.argv  # whole seconds, rounded up: never below the task's limit
    run_external(sandbox, spec.model_copy(update={"answer": ""}), instruction="x", token="t",  # type: ignore[arg-type]
                 command_timeout_s=0.2)
    assert "environment.timeout=1" in sandbox.argv


@pytest.mark.slow  # real Podman, the harness image
def test_mini_swe_agent_kills_a_command_at_the_limit_it_is_given(sandbox_settings: Settings) -> None:
    from appliance.harness.external import harness_image
    from appliance.sandbox import Sandbox

    # mini-swe-agent's own reader of `-c key=value`, and its own environment, in its image
    script = ("import time\n"
              "from minisweagent.config import get_config_from_spec\n"
              "from minisweagent.environments.local import LocalEnvironment\n"
              "env = LocalEnvironment(**get_config_from_spec('environment.timeout=2')['environment'])\n"
              "t0 = time.monotonic()\n"
              "out = env.execute({'command': 'sleep 30'})\n"
              "print(out['returncode'], round(time.monotonic() - t0), out['extra']['exception_type'])\n")
    image = harness_image(sandbox_settings, "mini-swe-agent", log=lambda _: None)
    with Sandbox.start(sandbox_settings, image=image) as sb:
        r = sb.exec(["python3", "-c", script], timeout=60)
    assert r.exit_code == 0, r.stderr
    code, seconds, kind = r.stdout.strip().splitlines()[-1].split()  # (mini prints a banner first)
    assert (code, kind) == ("-1", "TimeoutExpired") and int(seconds) < 10, r.stdout


def test_npm_recipes_install_on_the_host_without_running_package_scripts(tmp_path: Path, monkeypatch) -> None:
    """An npm recipe is its Containerfile and npm.txt; npm runs with --ignore-scripts (no package code on the
    host), and a failure names the listing and the registry."""
    import subprocess

    from appliance.errors import SetupError
    from appliance.harness import external

    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    for name in ("opencode", "claude-code", "codex"):
        recipe = external.recipe_dir(settings.harnesses[name])
        assert external.recipe_files(recipe) == external.NPM_FILES
        assert not settings.harnesses[name].at_init  # the product container has no npm
    seen: list[list[str]] = []

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", "404 Not Found")

    monkeypatch.setattr(external.subprocess, "run", fake_run)
    listing = external.recipe_dir(settings.harnesses["opencode"]) / "npm.txt"
    with pytest.raises(SetupError) as e:
        external.install_npm("opencode", listing, tmp_path / "site")
    assert "--ignore-scripts" in seen[0] and seen[0][-1] == "opencode-linux-x64@1.18.33"
    assert "404 Not Found" in e.value.message and str(listing) in e.value.hint
