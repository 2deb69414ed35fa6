"""`appliance tasks ...`: synth, list, show, validate, families."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import Settings
from appliance.tasks import load_task, write_task
from appliance.tasks.families import FAMILIES


def run(args: list[str], env: dict[str, str]):
    return CliRunner().invoke(main, args, env=env, catch_exceptions=False)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"APPLIANCE_HOME": str(tmp_path / "home")}


def test_families_and_help(env: dict[str, str]) -> None:
    r = run(["tasks", "families", "--json"], env)
    assert r.exit_code == 0 and set(json.loads(r.output)) == set(FAMILIES)
    for cmd in ("synth", "list", "show", "validate", "families"):
        assert "Usage:" in run(["tasks", cmd, "--help"], env).output


def test_synth_list_show(env: dict[str, str], tmp_path: Path) -> None:
    r = run(["tasks", "synth", "--family", "data", "--level", "3", "-n", "4", "--json"], env)
    ids = [row["id"] for row in json.loads(r.output)]
    assert r.exit_code == 0 and len(ids) == 4
    listed = json.loads(run(["tasks", "list", "--json", "--family", "data"], env).output)
    assert sorted(t["id"] for t in listed) == sorted(ids) and {t["status"] for t in listed} == {"proposed"}
    shown = run(["tasks", "show", ids[0]], env)
    assert shown.exit_code == 0 and ".csv" in shown.output  # the task's CSV file is shown
    out = tmp_path / "out"
    r = run(["tasks", "synth", "--family", "git", "--level", "5", "-n", "2", "--out", str(out)], env)
    assert r.exit_code == 0 and len([load_task(p) for p in out.iterdir()]) == 2


def test_user_mistakes_are_explained(env: dict[str, str]) -> None:
    r = CliRunner().invoke(main, ["tasks", "synth", "--family", "nope", "--level", "1"], env=env)
    assert r.exit_code == 1 and "choose one of" in r.output
    r = CliRunner().invoke(main, ["tasks", "show", "no-such-task"], env=env)
    assert r.exit_code == 1 and "no task" in r.output
    r = CliRunner().invoke(main, ["tasks", "validate", "/nonexistent/task"], env=env)
    assert r.exit_code == 1 and "does not exist" in r.output


@pytest.mark.slow
def test_validate_a_user_task(sandbox_settings: Settings, tmp_path: Path) -> None:
    env = {"APPLIANCE_HOME": str(sandbox_settings.home),
           "APPLIANCE_PODMAN__GRAPHROOT": str(sandbox_settings.podman_graphroot),
           "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps(
               [str(p) for p in sandbox_settings.podman.additional_image_stores])}
    run(["tasks", "synth", "--family", "text", "--level", "2", "-n", "1", "--out", str(tmp_path)], env)
    task = next(tmp_path.iterdir())
    r = run(["tasks", "validate", str(task), "--json"], env)
    assert r.exit_code == 0 and json.loads(r.output)["ok"] is True
    spec = load_task(task)
    spec.solution = "true\n"
    write_task(spec, tmp_path / "broken.toml")
    r = run(["tasks", "validate", str(tmp_path / "broken.toml")], env)
    assert r.exit_code == 1 and "rejected: reference solution fails the verifier" in r.output
