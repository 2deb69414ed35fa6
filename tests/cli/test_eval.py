"""`appliance eval` and `appliance tasks validate` on task sets: what they refuse, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from appliance.cli import main
from appliance.config import load_settings
from appliance.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor"


def run(args: list[str], home: Path):
    return CliRunner().invoke(main, args, env={"APPLIANCE_HOME": str(home)}, catch_exceptions=False)


def test_eval_refuses_while_a_loop_holds_the_store(tmp_path: Path) -> None:
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    with Store(settings.db_path).loop_lock():
        r = run(["eval", str(FIXTURES / "api-fix")], tmp_path)
    assert r.exit_code != 0 and "running the loop" in r.output and "Traceback" not in r.output, r.output


def test_eval_takes_a_version_or_the_base_not_both(tmp_path: Path) -> None:
    r = run(["eval", str(FIXTURES / "api-fix"), "--version", "3", "--base"], tmp_path)
    assert r.exit_code == 2 and "not both" in r.output
    assert "Usage:" in run(["eval", "--help"], tmp_path).output


def test_validating_a_task_that_cannot_be_served_names_the_reason(tmp_path: Path) -> None:
    r = run(["tasks", "validate", str(FIXTURES / "unserved-base"), "--json"], tmp_path)
    out = json.loads(r.output)
    assert r.exit_code == 1 and out["passed"] == 0 and out["total"] == 1
    assert "cannot be served offline" in out["excluded"][0]["reason"]


def test_eval_refuses_a_version_that_is_not_stored_before_anything_runs(tmp_path: Path) -> None:
    r = run(["eval", str(FIXTURES / "api-fix"), "--version", "3"], tmp_path)  # a new store has the base alone
    assert r.exit_code == 1 and "policy version 3 is not stored" in r.output, r.output
    assert "building the environment" not in r.output
