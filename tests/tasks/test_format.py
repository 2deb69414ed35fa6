"""The task format: directory and single-file forms, the store dict, and the errors users see."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from appliance.tasks import Limits, TaskFormatError, TaskSpec, load_task, write_task
from appliance.tasks.families import FAMILIES, generate


def sample_spec() -> TaskSpec:
    return TaskSpec(id="hello-1", family="files", difficulty=1, instruction="Run this command: echo hi > a.txt",
                    verify="test \"$(cat a.txt)\" = hi\n", solution="echo hi > a.txt\n",
                    files={"tests/keep.txt": "keep me\n", "b.txt": "b\n"}, setup="echo s > s.txt\n",
                    protected=["tests/keep.txt"], limits=Limits(max_turns=3, timeout_s=10.0), meta={"seed": "1"})


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
