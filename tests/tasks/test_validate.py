"""Agent-free validation and the pristine verifier run, in real sandboxes (isolated Podman storage)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.schemas import TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec, dedupe, validate_agent_free, verify_workspace
from appliance.tasks import validate as v
from appliance.tasks.families import FAMILIES, LEVELS, generate, synthesize

pytestmark = pytest.mark.slow  # real Podman


def custom(**change: object) -> TaskSpec:
    base = dict(id="custom-1", family="files", difficulty=1, instruction="Write hi into a.txt.",
                verify='test "$(cat a.txt)" = hi\n', solution="echo hi > a.txt\n", source="user")
    return TaskSpec(**(base | change))  # type: ignore[arg-type]


def validate_all(settings: Settings, specs: list[TaskSpec], parallel: int = 4) -> list[v.Validation]:
    return v.validate_many(settings, specs, parallel=parallel)


def test_one_task_of_every_family_and_level_is_valid(sandbox_settings: Settings) -> None:
    specs = [generate(f, lvl, random.Random(f"sample:{f}:{lvl}")) for f in FAMILIES for lvl in LEVELS]
    bad = [(s.id, r.reason) for s, r in zip(specs, validate_all(sandbox_settings, specs), strict=True) if not r.ok]
    assert bad == []


def test_a_sound_user_task_passes_every_stage(sandbox_settings: Settings) -> None:
    result = validate_agent_free(sandbox_settings, custom())
    assert result.ok, result.reason
    assert [s.name for s in result.stages] == ["format", "untouched", "reference-1", "verify-1", "reference-2",
                                               "verify-2"]


@pytest.mark.parametrize("change, reason", [
    ({"solution": "echo wrong > a.txt\n"}, v.REFERENCE_FAILS),
    ({"verify": "exit 0\n"}, v.UNTOUCHED_PASSES),
    ({"verify": 'test "$(cat a.txt)" = hi || exit 1\necho "SCORE=0.$RANDOM$RANDOM" >&3\n'}, v.NONDETERMINISTIC),
    ({"setup": "python3 -c \"import urllib.request; urllib.request.urlopen('http://example.com', timeout=5)\"\n"},
     v.NEEDS_NETWORK),
    ({"solution": "sleep 30; echo hi > a.txt\n", "limits": v.TaskSpec.__dataclass_fields__["limits"].default_factory()},
     v.OVER_LIMIT),
    ({"verify": "import sys\nsys.exit(open('a.txt').read() != 'hi\\n'\n", "verify_lang": "python"}, v.VERIFIER_CRASHED),
    # pays for doing nothing: SCORE=1 and exit 1 untouched, SCORE=0 and exit 0 after the reference
    ({"verify": 'if test -f a.txt; then echo SCORE=0 >&3; exit 0; else echo SCORE=1 >&3; exit 1; fi\n'},
     v.UNTOUCHED_SCORES),
    ({"files": {"big.bin": "x" * (65 << 20)}}, v.TOO_LARGE),
])
def test_each_rejection_reason(sandbox_settings: Settings, change: dict, reason: str) -> None:
    spec = custom(**change)
    if reason == v.OVER_LIMIT:
        spec.limits.command_timeout_s = 2
    result = validate_agent_free(sandbox_settings, spec)
    assert not result.ok and reason in (result.reason or ""), result.reason


def test_a_verifier_that_fails_by_assert_or_exception_is_a_plain_failure(sandbox_settings: Settings) -> None:
    # the pytest habit: on the untouched workspace the assert (or the missing file) raises; that is "fail"
    by_assert = custom(verify="assert open('a.txt').read() == 'hi\\n', 'a.txt should say hi'\n", verify_lang="python")
    result = validate_agent_free(sandbox_settings, by_assert)
    assert result.ok, result.reason


def test_leftovers_of_one_stage_do_not_reach_the_next(sandbox_settings: Settings) -> None:
    # A background writer, /tmp and $HOME files: none of them exists for the verifier (as in a rollout,
    # where the verifier runs in a new sandbox), also when one sandbox validates several tasks.
    late = custom(id="late", solution="(sleep 1; echo hi > a.txt) &\n")
    stash = custom(id="stash", solution="echo hi > /tmp/a.txt; echo hi > ~/a.txt\n",
                   verify='test "$(cat /tmp/a.txt)" = hi || test "$(cat ~/a.txt)" = hi\n')
    results = v.validate_many(sandbox_settings, [late, stash, custom()], parallel=1)
    assert [r.reason and r.reason.split(":")[0] for r in results] == [v.REFERENCE_FAILS, v.REFERENCE_FAILS, None]


def test_verifier_judges_with_restored_protected_files(sandbox_settings: Settings, tmp_path: Path) -> None:
    spec = synthesize("pyfix", 3, 1)[0]
    test_file, module = spec.protected[0], next(p for p in spec.files if p not in spec.protected)
    ws = tmp_path / "ws"
    ws.mkdir()
    v.write_workspace(spec, ws)
    (ws / test_file).write_text("print('all tests passed')\n")  # the agent "fixes" the tests instead
    verdict = verify_workspace(sandbox_settings, spec, ws)
    assert not verdict.passed and verdict.tampered == [test_file] and verdict.error is None
    assert (ws / test_file).read_text() == "print('all tests passed')\n"  # the agent's copy is left alone

    good = tmp_path / "good"
    good.mkdir()
    v.write_workspace(spec, good)
    fixed = spec.solution.split("<<'EOF'\n", 1)[1].rsplit("EOF", 1)[0]
    (good / module).write_text(fixed)
    verdict = verify_workspace(sandbox_settings, spec, good)
    assert verdict.passed and verdict.score == 1.0 and verdict.tampered == []


def test_a_planted_symlink_cannot_redirect_the_restore(sandbox_settings: Settings, tmp_path: Path) -> None:
    spec = custom(files={"tests/check.txt": "x\n"}, protected=["tests/check.txt"])
    outside, ws = tmp_path / "outside", tmp_path / "ws"
    outside.mkdir()
    ws.mkdir()
    os.symlink(outside, ws / "tests")
    verdict = verify_workspace(sandbox_settings, spec, ws)
    assert verdict.tampered == ["tests/check.txt", "tests (link: points outside the tree)"]
    assert list(outside.iterdir()) == []


def test_a_link_the_agent_made_inside_the_workspace_reaches_the_verifier(sandbox_settings: Settings,
                                                                         tmp_path: Path) -> None:
    # the `symlink` operation: the host copy of the workspace holds no links, so judged from it the
    # reference itself failed every practice rollout while agent-free validation (in-sandbox) passed
    from appliance.sandbox import Sandbox

    spec = next(s for s in synthesize("files", 2, 40, seed="link") if s.meta["operation"] == "symlink")
    ws = tmp_path / "ws"
    ws.mkdir()
    v.write_workspace(spec, ws)
    with Sandbox.start(sandbox_settings, workspace=ws) as sb:
        assert sb.exec(spec.solution).exit_code == 0
    assert not any(p.is_symlink() for p in ws.rglob("*"))  # still no link on the host
    assert not verify_workspace(sandbox_settings, spec, ws).passed
    verdict = verify_workspace(sandbox_settings, spec, ws, archive=sb.copied_out)
    assert verdict.passed and verdict.tampered == [], verdict.output


def test_admit_stores_verdicts_and_drops_duplicates(sandbox_settings: Settings, store: Store) -> None:
    good = synthesize("text", 2, 2)
    broken = custom(id="broken-1", solution="true\n")
    results = v.admit(sandbox_settings, store, [*good, broken, good[0]], run_id="r1")
    assert len(results) == 3
    assert {t.id: t.status for t in store.tasks("r1")} == {good[0].id: TaskStatus.VALID, good[1].id: TaskStatus.VALID,
                                                           "broken-1": TaskStatus.REJECTED}
    assert v.REFERENCE_FAILS in store.get_task("broken-1").reject_reason
    assert v.admit(sandbox_settings, store, good, run_id="r1") == []  # decided tasks are not validated again


def test_near_duplicates_differ_only_in_numbers() -> None:
    a = custom(instruction="Write 12 lines into a.txt.")
    b = custom(id="custom-2", instruction="Write 13 lines  into A.txt.")
    kept, dropped = dedupe([a, b, custom(id="c3", instruction="Something else.")])
    assert [s.id for s in kept] == ["custom-1", "c3"] and [s.id for s in dropped] == ["custom-2"]


@pytest.mark.skipif(os.environ.get("APPLIANCE_TASK_SWEEP", "1") == "0", reason="APPLIANCE_TASK_SWEEP=0")
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_tasks_of_every_level_pass_validation(sandbox_settings: Settings, name: str) -> None:
    # 10 per family and level in the suite (750 validations, ~7 min of CI's 90 on 2 cores); the full sweep of
    # 50 (3,750, over half an hour) is `APPLIANCE_TASK_SWEEP_N=50 scripts/test tests/tasks/test_validate.py`
    n = int(os.environ.get("APPLIANCE_TASK_SWEEP_N", "10"))
    specs = [s for lvl in LEVELS for s in synthesize(name, lvl, n, seed="sweep")]
    bad = [(s.id, r.reason) for s, r in zip(specs, validate_all(sandbox_settings, specs), strict=True) if not r.ok]
    assert bad == []


def test_many_small_files_are_too_large_for_the_workspace_not_an_infra_error(sandbox_settings: Settings) -> None:
    # 34,000 one-byte files were 34 MB of archive, under the byte cap, but a page each in the tmpfs
    spec = custom(files={f"f{i}.txt": "x" for i in range(34_000)})
    result = validate_agent_free(sandbox_settings, spec)
    assert not result.ok and (result.reason or "").startswith(v.TOO_LARGE), result.reason
