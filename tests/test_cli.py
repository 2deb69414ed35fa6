import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str], home: Path, **env: str):
    return CliRunner().invoke(main, args, env={"APPLIANCE_HOME": str(home), **env}, catch_exceptions=False)


@pytest.mark.parametrize("cmd", [[], ["doctor"], ["init"], ["status"], ["version"], ["config"], ["serve"]])
def test_every_command_has_help(cmd: list[str], tmp_path: Path) -> None:
    r = run([*cmd, "--help"], tmp_path)
    assert r.exit_code == 0 and "Usage:" in r.output


def test_status_on_an_empty_store(tmp_path: Path) -> None:
    r = run(["status", "--json"], tmp_path)
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["run"] is None and data["engine"]["state"] == "stopped"


def test_bad_config_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path), "APPLIANCE_SANDBOX__MEMORY": "", "APPLIANCE_ENGINE__PORT": "80"}
    out = subprocess.run([str(REPO / ".venv/bin/appliance"), "status"], capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert "engine.port" in out.stderr and "hint:" in out.stderr
    assert "Traceback" not in out.stderr


def test_serve_starts_through_the_wiring_and_explains_a_missing_model(tmp_path: Path) -> None:
    # `serve` is app.engine_and_proxy (the engine and proxy half of app.services): its start-up line, its
    # error, and the engine left stopped in the store
    r = CliRunner().invoke(main, ["serve", "--port", "0"], catch_exceptions=False,
                           env={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__MODEL": str(tmp_path / "none")})
    assert r.exit_code == 1
    assert "starting the engine on http://" in r.output and "no model folder" in r.output and "hint:" in r.output
    status = json.loads(run(["status", "--json"], tmp_path).output)
    assert status["engine"]["state"] == "stopped"


def test_config_lists_keys_with_help(tmp_path: Path) -> None:
    r = run(["config"], tmp_path)
    assert r.exit_code == 0
    assert "engine.dtype = 'float32'" in r.output and "reproduces the trainer" in r.output


def test_report_prints_markdown_json_and_explains_a_missing_one(tmp_path: Path) -> None:
    from appliance.store import Store

    store = Store(tmp_path / "appliance.db")
    store.create_run("r1", {})
    store.save_report("r1", 0, {"heldout_pass_at_1": 0.5}, "# Capability report — iteration 0")
    assert "iteration 0" in run(["report"], tmp_path).output
    assert json.loads(run(["report", "0", "--json"], tmp_path).output) == {"heldout_pass_at_1": 0.5}
    r = CliRunner().invoke(main, ["report", "3"], env={"APPLIANCE_HOME": str(tmp_path)})
    assert r.exit_code == 1 and "no report for iteration 3" in r.output


def test_backup_copies_the_store_and_explains_a_bad_destination(tmp_path: Path) -> None:
    r = run(["backup", str(tmp_path / "out" / "copy.db")], tmp_path / "home")
    assert r.exit_code == 0 and (tmp_path / "out" / "copy.db").stat().st_size > 0
    r = CliRunner().invoke(main, ["backup", str(tmp_path / "home" / "appliance.db")],
                           env={"APPLIANCE_HOME": str(tmp_path / "home")})
    assert r.exit_code != 0 and "onto itself" in r.output
