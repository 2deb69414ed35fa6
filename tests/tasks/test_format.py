"""The task format: directory and single-file forms, the store dict, and the errors users see."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from appliance.tasks import Limits, TaskFormatError, TaskSpec, load_task, write_task
from appliance.tasks.families import FAMILIES, generate
from appliance.tasks.format import dumps_toml


def sample_spec() -> TaskSpec:
    return TaskSpec(id="hello-1", family="files", difficulty=1, instruction="Run this command: echo hi > a.txt",
                    verify="test \"$(cat a.txt)\" = hi\n", solution="echo hi > a.txt\n",
                    files={"tests/keep.txt": "keep me\n", "b.txt": "b\n"}, setup="echo s > s.txt\n",
                    protected=["tests/keep.txt"],
                    limits=Limits(max_turns=3, command_timeout_s=10.0, setup_timeout_s=20.0, verifier_timeout_s=5.0),
                    meta={"seed": "1"})


@pytest.mark.parametrize("form", ["dir", "file"])
def test_round_trip_through_disk(tmp_path: Path, form: str) -> None:
    spec = sample_spec()
    target = tmp_path / ("task" if form == "dir" else "task.toml")
    write_task(spec, target)
    assert load_task(target) == spec


def test_round_trip_through_the_store_dict() -> None:
    for name in FAMILIES:
        for level in (1, 5):
            spec = generate(name, level, random.Random(7))
            assert TaskSpec.from_spec(spec.to_spec()) == spec


def test_directory_form_reads_verify_py(tmp_path: Path) -> None:
    d = tmp_path / "mytask"
    (d / "workspace").mkdir(parents=True)
    (d / "workspace" / "in.txt").write_text("x\n")
    (d / "task.toml").write_text('format_version = 1\nfamily = "text"\ndifficulty = 2\n'
                                 'instruction = "copy in.txt to out.txt"\n')
    (d / "verify.py").write_text("import sys; sys.exit(0)\n")
    (d / "solution.sh").write_text("cp in.txt out.txt\n")
    spec = load_task(d)
    assert (spec.id, spec.verify_lang, spec.files, spec.source) == ("mytask", "python", {"in.txt": "x\n"}, "procedural")


@pytest.mark.parametrize("change, words", [
    ({"difficulty": 7}, "outside 1..5"),
    ({"protected": ["missing.txt"]}, "not workspace files"),
    ({"files": {"../escape": "x"}}, "leaves the workspace"),
    ({"format_version": 9}, "format_version"),
    ({"bogus": 1}, "unknown task keys"),
    ({"verify": ""}, "missing verify"),
])
def test_bad_tasks_are_explained(change: dict, words: str) -> None:
    spec = sample_spec().to_spec() | change
    with pytest.raises(TaskFormatError) as e:
        TaskSpec.from_spec(spec)
    assert words in e.value.message and e.value.hint


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "t.toml"
    p.write_text("id = = 1\n")
    with pytest.raises(TaskFormatError, match="t.toml is not valid TOML"):
        load_task(p)


# --- hostile task files (issue 14): each is a clear rejection, never a traceback or a host file read ---

def _task_dir(tmp_path: Path) -> Path:
    d = tmp_path / "t"
    write_task(sample_spec(), d)
    return d


def test_links_in_a_task_directory_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("root-only\n")
    for where in ("workspace/leak.txt", "workspace/tests", "verify.sh", "workspace"):
        d = _task_dir(tmp_path)
        target = d / where
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        os.symlink(secret if where.endswith((".txt", ".sh")) else tmp_path, target)
        with pytest.raises(TaskFormatError, match="symbolic link") as e:
            load_task(d)
        assert e.value.hint
        shutil.rmtree(d)
    d = _task_dir(tmp_path)
    os.mkfifo(d / "workspace" / "pipe")  # would block a reader forever
    with pytest.raises(TaskFormatError, match="not a regular file"):
        load_task(d)


def test_invalid_utf8_and_toml_bombs_are_clear_rejections(tmp_path: Path) -> None:
    d = _task_dir(tmp_path)
    (d / "solution.sh").write_bytes(b"echo \xff\xfe hi\n")
    with pytest.raises(TaskFormatError, match="solution.sh is not UTF-8 text .*line 1"):
        load_task(d)
    bomb = tmp_path / "bomb.toml"
    bomb.write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(TaskFormatError, match="nests .* too deeply"):
        load_task(bomb)
    (tmp_path / "bin.toml").write_bytes(b'id = "\xc3\x28"\n')
    with pytest.raises(TaskFormatError, match="not UTF-8"):
        load_task(tmp_path / "bin.toml")


@pytest.mark.parametrize("limits, words", [
    ({"command_timeout_s": float("nan")}, "finite"), ({"setup_timeout_s": float("inf")}, "finite"),
    ({"verifier_timeout_s": 1e12}, "finite"), ({"command_timeout_s": -1}, "finite"),
    ({"verifier_timeout_s": "30"}, "finite"), ({"max_turns": 10**9}, "max_turns"),
    ({"max_turns": 0}, "max_turns"), ({"max_turns": 2.5}, "max_turns"),
])
def test_absurd_limits_are_refused(limits: dict, words: str) -> None:
    spec = sample_spec().to_spec() | {"limits": {"max_turns": 3, "command_timeout_s": 10.0} | limits}
    with pytest.raises(TaskFormatError, match=words) as e:
        TaskSpec.from_spec(spec)
    assert e.value.hint


def test_the_one_time_limit_of_earlier_task_files_is_read_as_command_and_setup_limits(tmp_path: Path) -> None:
    old = sample_spec().to_spec() | {"limits": {"max_turns": 3, "timeout_s": 12.0}}  # a row stored by an older build
    limits = TaskSpec.from_spec(old).limits
    assert (limits.command_timeout_s, limits.setup_timeout_s, limits.verifier_timeout_s) == (12.0, 12.0, 60.0)
    (tmp_path / "old.toml").write_text(dumps_toml(sample_spec()).replace("command_timeout_s = 10.0", "timeout_s = 7.0")
                                       .replace("setup_timeout_s = 20.0\n", ""))
    assert load_task(tmp_path / "old.toml").limits.command_timeout_s == 7.0
    with pytest.raises(TaskFormatError, match="both timeout_s and command_timeout_s") as e:
        TaskSpec.from_spec(old | {"limits": {"timeout_s": 12.0, "command_timeout_s": 5.0}})
    assert "older name" in e.value.hint


@pytest.mark.parametrize("change, words", [
    ({"difficulty": "hard"}, "not a number"), ({"files": ["a"]}, "must be a table"),
    ({"files": {"a.txt": 3}}, "must be text"), ({"verify": ["x"]}, "must be text"),
    ({"files": {"a\0b": "x"}}, "not a file name"), ({"solution": "echo \0"}, "NUL"),
    ({"limits": 5}, "must be a table"),
])
def test_wrong_types_are_explained(change: dict, words: str) -> None:
    with pytest.raises(TaskFormatError, match=words):
        TaskSpec.from_spec(sample_spec().to_spec() | change)
