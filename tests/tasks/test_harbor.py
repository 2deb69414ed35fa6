"""Harbor and Terminal-Bench 1 directories read as they are; what cannot be honoured refused with its reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from appliance.errors import TaskFormatError
from appliance.tasks.environment import derive, served
from appliance.tasks.foreign import task_paths
from appliance.tasks.harbor import HARBOR, STAGE, TB1, read_foreign, task_image, to_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor"


def copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def test_harbor_directories_are_read_with_their_schema_and_legacy_keys() -> None:
    api = read_foreign(FIXTURES / "api-fix")
    assert api.kind == HARBOR and api.id == "api-fix" and "KeyError" in api.instruction
    assert api.difficulty == 2 and api.category == "api" and api.tags == ["python", "bugfix"]
    assert api.limits.verifier_timeout_s == 60.0 and set(api.tests) == {"test.sh", "test_api.py"}
    assert any("memory_mb" in n for n in api.notes) and api.build_timeout_s == 300.0
    cli = read_foreign(FIXTURES / "cli-build")  # schema_version 1.1, docker_image and workdir, no Dockerfile
    assert cli.dockerfile is None and cli.docker_image == "debian:bookworm" and cli.workdir == "/app"
    data = read_foreign(FIXTURES / "data-job")
    assert data.verifier_env == {"EXPECTED_REGIONS": "3"} and data.solution_env == {"OUT": "/app/summary.json"}


def test_a_terminal_bench_1_directory_is_read() -> None:
    t = read_foreign(FIXTURES / "tb1-rename")
    assert t.kind == TB1 and t.test_entry == "run-tests.sh" and "run-tests.sh" in t.tests
    assert t.solution_entry == "solution.sh" and t.limits.verifier_timeout_s == 60.0 and t.category == "file-operations"


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda d: (d / "environment" / "docker-compose.yaml").write_text("services: {}\n"), "docker-compose"),
    (lambda d: (d / "tests" / "test.sh").unlink(), "no tests/test.sh"),
    (lambda d: (d / "solution" / "solve.sh").unlink(), "no solution/solve.sh"),
    (lambda d: (d / "task.toml").write_text('version = "2.0"\n'), "not 1.x"),
    (lambda d: (d / "task.toml").write_text('[environment]\ngpus = 1\n'), "GPU"),
    (lambda d: (d / "tests" / "link").symlink_to("/etc/passwd"), "symbolic link"),
])
def test_what_cannot_be_honoured_is_refused_with_its_reason(tmp_path: Path, edit, reason: str) -> None:  # type: ignore[no-untyped-def]
    d = copy("api-fix", tmp_path)
    edit(d)
    with pytest.raises(TaskFormatError, match=reason):
        read_foreign(d)


def test_a_tb1_solution_yaml_and_a_second_service_are_refused(tmp_path: Path) -> None:
    d = copy("tb1-rename", tmp_path)
    (d / "solution.sh").rename(d / "solution.yaml")
    with pytest.raises(TaskFormatError, match="solution.yaml"):
        read_foreign(d)
    d = copy("tb1-rename", tmp_path / "b")
    (d / "docker-compose.yaml").write_text("services:\n  client: {}\n  db: {}\n")
    with pytest.raises(TaskFormatError, match="2 services"):
        read_foreign(d)


def test_bases_are_served_offline_only_where_debian_12_can_stand_in() -> None:
    assert served("debian:bookworm") and served("python:3.13-slim-bookworm")
    assert served("docker.io/library/python:3.11-bookworm")
    assert not served("ubuntu:24.04") and not served("python:3.12-alpine") and not served("python:3.12")
    with pytest.raises(TaskFormatError, match="cannot be served offline"):
        derive(read_foreign(FIXTURES / "unserved-base"), "appliance-sandbox:x")


def test_the_derived_containerfile_keeps_the_tasks_lines_and_links_the_workdir(tmp_path: Path) -> None:
    text, workdir, base = derive(read_foreign(FIXTURES / "data-job"), "appliance-sandbox:abc")
    assert text.splitlines()[1] == "FROM appliance-sandbox:abc" and base == "python:3.12-bookworm"
    assert "COPY data/sales.csv \\\n     /app/sales.csv" in text  # a continued instruction stays one
    assert workdir == "/app" and 'ln -s /workspace "$d"' in text and text.rstrip().endswith("WORKDIR /workspace")
    d = copy("api-fix", tmp_path)
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm AS b\nRUN true\nFROM debian:bookworm\n")
    with pytest.raises(TaskFormatError, match="multi-stage"):
        derive(read_foreign(d), "x")
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /\n")
    with pytest.raises(TaskFormatError, match="workdir"):
        derive(read_foreign(d), "x")


def test_the_spec_carries_tests_and_solution_in_its_scripts_never_in_the_workspace() -> None:
    t = read_foreign(FIXTURES / "api-fix")
    spec = to_spec(t, "appliance-sandbox-task:0123456789abcdef", "/app", ["a note"])
    assert spec.files == {} and spec.source == "user" and spec.family == "api"
    assert f"{STAGE}/tests" in spec.verify and "reward.txt" in spec.verify
    assert "bash /solution/solve.sh" in spec.solution
    assert spec.meta["notes"][-1] == "a note"
    assert task_image(spec) == {"image": "appliance-sandbox-task:0123456789abcdef"}
    spec.meta["image"] = "docker.io/evil:latest"  # a task's metadata picks no image the appliance did not build
    assert task_image(spec) == {}


def test_a_folder_of_tasks_lists_each_task(tmp_path: Path) -> None:
    assert [p.name for p in task_paths([FIXTURES])] == sorted(p.name for p in FIXTURES.iterdir())
    assert task_paths([FIXTURES / "api-fix"]) == [FIXTURES / "api-fix"]
