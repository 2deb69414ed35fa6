"""The request-shaped kinds (issue 29): answer tasks, multi-step chores, one-line edits, git beyond the basics.

Each kind exists at levels 2-4 (and level 1 where its solution is one command), generates deterministically,
keeps held-out phrasings apart from the training ones, and its verifiers catch what they are there to catch
(an answer printed instead of written, a file rewritten around its one changed line). The slow test validates
one task per new operation in real Podman."""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from appliance.config import Settings
from appliance.tasks import validate as v
from appliance.tasks.families import FAMILIES, REGISTRY, generate, synthesize
from appliance.tasks.families._ops import Ctx, pairs, render

KINDS = ("answer", "chores", "edit")
GIT_NEW = ["git-amend-add-file", "git-revert-commit", "git-cherry-pick", "git-find-commit", "git-restore-file"]


def new_ops() -> list:
    return [o for f in KINDS for o in REGISTRY[f]] + [o for o in REGISTRY["git"] if o.name in GIT_NEW]


def test_each_kind_is_a_family_with_operations_at_levels_two_to_four() -> None:
    for name in KINDS:
        assert name in FAMILIES and FAMILIES[name].DESCRIPTION
        assert len(REGISTRY[name]) >= 5
        for level in (2, 3, 4):
            assert pairs(name, level, "train") and pairs(name, level, "heldout"), (name, level)
    git_levels = {o.name: o.levels for o in REGISTRY["git"]}
    assert all(set(git_levels[n]) >= {3, 4} for n in GIT_NEW)


def test_generation_is_deterministic_and_carries_operation_and_phrasing() -> None:
    for name in (*KINDS, "git"):
        for level in (1, 2, 3, 4, 5):
            a = generate(name, level, random.Random(f"k{level}"), split="train")
            assert a == generate(name, level, random.Random(f"k{level}"), split="train")
            assert a.meta["operation"] and "phrasing" in a.meta
    for o in new_ops():
        for i in range(len(o.phrasings)):
            a, b = (render(o, i, max(o.levels), random.Random(f"{o.name}:{i}")) for _ in range(2))
            assert a == b and a.meta["operation"] == o.name and a.meta["phrasing"] == i


def test_heldout_phrasings_differ_from_training_ones() -> None:
    for o in new_ops():
        held = o.heldout_phrasings()
        train = [p for i, p in enumerate(o.phrasings) if i not in held]
        assert len(o.phrasings) >= 4 and len(train) >= 3 and held, o.name
        assert all(o.phrasings[h] not in train for h in held), o.name
    for name in KINDS:
        train = {(s.meta["operation"], s.meta["phrasing"]) for s in synthesize(name, 3, 30, seed="a")}
        held = {(s.meta["operation"], s.meta["phrasing"]) for s in synthesize(name, 3, 30, seed="a", split="heldout")}
        assert train and held and not train & held


def test_requests_state_a_goal_and_do_not_name_the_tool() -> None:
    for o in new_ops():
        word = o.tool.split()[0] if o.family != "git" else o.tool.split()[-1].lstrip("-")
        for i in range(len(o.phrasings)):
            spec = render(o, i, 3, random.Random(f"{o.name}:{i}"))
            words = {w.strip(".,;:!?()\"'`").lower() for w in spec.instruction.split()}
            assert (" " not in o.tool or o.tool not in spec.instruction) and word.lower() not in words, (o.name, i)
            assert "```" not in spec.instruction


def _run(spec, tmp_path, solve: bool) -> subprocess.CompletedProcess:
    for p, t in spec.files.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(t)
    env = dict(os.environ, HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["bash", "-c", spec.setup + (spec.solution if solve else "")], cwd=tmp_path, env=env, check=True)
    return subprocess.run(["python3", "-c", spec.verify], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_an_answer_printed_instead_of_written_fails_with_a_useful_line(tmp_path) -> None:
    o = next(o for o in REGISTRY["answer"] if o.name == "answer-count-status")
    spec = render(o, 0, 2, random.Random("p"))
    spec.solution = spec.solution.split(" > ")[0]  # the answer goes to stdout only
    r = _run(spec, tmp_path, solve=True)
    assert r.returncode == 1 and "FAIL:" in r.stdout and "printing it is not enough" in r.stdout


def test_a_file_rewritten_around_its_one_change_fails(tmp_path) -> None:
    o = next(o for o in REGISTRY["edit"] if o.name == "edit-yaml-value")
    ok = render(o, 0, 3, random.Random("r"))
    (tmp_path / "a").mkdir()
    assert _run(ok, tmp_path / "a", solve=True).returncode == 0
    rewritten = render(o, 0, 3, random.Random("r"))
    src = next(iter(rewritten.files))
    rewritten.solution += f"\nsed -i '1s/.*/# the {src} file/' {src}"  # the right value, a comment "from memory"
    (tmp_path / "b").mkdir()
    r = _run(rewritten, tmp_path / "b", solve=True)
    assert r.returncode == 1 and "every other line" in r.stdout


@pytest.mark.slow  # real Podman
@pytest.mark.timeout(1800)
def test_one_task_per_new_operation_validates_in_real_sandboxes(sandbox_settings: Settings) -> None:
    specs = [render(o, 1, max(o.levels), random.Random(f"kinds:{o.name}")) for o in new_ops()]
    results = v.validate_many(sandbox_settings, specs, parallel=2)
    bad = [(s.meta["operation"], r.reason) for s, r in zip(specs, results, strict=True) if not r.ok]
    assert bad == []


def test_a_settings_edit_has_look_alikes_and_a_block_edit_repeats_its_line() -> None:
    ops = {o.name: o for o in REGISTRY["edit"]}
    for i in range(30):
        case = ops["edit-setting"].build(Ctx(random.Random(i), None))
        (text,) = case.files.values()
        key, old = case.facts["key"], case.facts["old"]
        near = [line for line in text.splitlines() if key[:5] in line]
        assert len(near) >= 3, near  # the line, a commented-out value and a look-alike key (same prefix)
        assert case.solution.startswith("sed -i 's") and case.solution.endswith(case.facts["src"])
        assert old.split(".")[-1] in case.solution
        case = ops["edit-in-block"].build(Ctx(random.Random(i), None))
        (text,) = case.files.values()
        line_no = int(case.solution.split("'")[1].split("s")[0])
        changed = text.splitlines()[line_no - 1]
        assert case.facts["old"] in changed and text.splitlines().count(changed) >= 2


def test_an_edit_reference_replaces_the_shortest_span_that_occurs_once() -> None:
    from appliance.tasks.families._kinds import sed_edit

    doc = '{\n  "version": "2.5.2",\n  "retries": 3,\n  "port": 3\n}\n'
    assert sed_edit(doc, 1, '  "version": "2.5.3",', "a.json") == """sed -i 's/"2.5.2"/"2.5.3"/' a.json"""
    assert sed_edit(doc, 2, '  "retries": 6,', "a.json") == """sed -i 's/"retries": 3/"retries": 6/' a.json"""
    env = "CONNECT_TIMEOUT=30\nTIMEOUT=30\n"  # every shorter span also matches the look-alike
    assert sed_edit(env, 1, "TIMEOUT=60", "a.env") == "sed -i 's|^TIMEOUT=30$|TIMEOUT=60|' a.env"
    assert sed_edit("    return age > 18\n", 0, "    return age >= 18", "r.py") == "sed -i 's/age > 18/age >= 18/' r.py"
    assert sed_edit("x = a[1]\nb = 1\n", 0, "x = a[2]", "r.py") == r"sed -i 's/a\[1/a[2/' r.py"  # [ escaped
