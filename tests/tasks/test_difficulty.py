"""The difficulty controller reads the diagnosis report (a `CapabilityReport`)."""

from __future__ import annotations

from appliance.schemas import CapabilityReport
from appliance.tasks.difficulty import expected_variance, next_levels, plan, split_budget


def cell(n: int, passed: int) -> dict:
    return {"n": n, "passed": passed, "pass_rate": passed / n}


REPORT = CapabilityReport.of({
    "train": {"files": {"1": cell(8, 8)}, "text": {"2": cell(8, 0)}, "data": {"3": cell(8, 3)},
              "git": {"1": cell(2, 2)}},
    "heldout": {"pipeline": {"4": cell(4, 4)}},
    "band": {"script": {"too_easy": 5}, "pyfix": {"too_hard": 3}, "replace": {"learnable": 2, "too_hard": 4}},
    "family_pass_rate": {"files": 1.0, "text": 0.0, "data": 0.375, "pipeline": 1.0},
    "weak_families": ["text", "data", "files", "pipeline"],
})


def test_levels_move_one_step_on_evidence() -> None:
    current = {"files": 1, "text": 2, "data": 3, "git": 1, "pipeline": 4, "script": 2, "pyfix": 1, "replace": 3}
    assert next_levels(REPORT, current) == {
        "files": 2,  # mastered
        "text": 1,  # everything fails
        "data": 3,  # inside the band
        "git": 1,  # too little evidence
        "pipeline": 4,  # held-out results are never evidence: nothing practised at L4 yet
        "script": 3,  # every validated task too easy
        "pyfix": 1,  # already at the bottom
        "replace": 3,  # still has learnable tasks
    }
    assert next_levels(None, {"files": 2}) == {"files": 2}
    assert next_levels(REPORT, {"files": 5}) == {"files": 5}


def test_budget_goes_where_groups_carry_a_signal() -> None:
    budget = split_budget(REPORT, 40, ["files", "text", "data", "pipeline", "git"])
    assert sum(budget.values()) == 40
    # data (3/8) is nearest 50 %; text (0/8) and files (8/8) teach as little as each other
    assert budget["data"] > budget["text"] == budget["files"] >= 1
    assert budget["git"] > budget["files"]  # 2/2 is weak evidence: shrunk toward the middle
    assert sum(split_budget(None, 7, ["files", "text", "data"]).values()) == 7
    # plan() weighs each family at the level it moves to: files L2 and text L1 have no rollouts yet
    assert plan(REPORT, {"files": 1, "text": 2}, 10) == [("files", 2, 5), ("text", 1, 5)]


def test_budget_is_weighted_by_p_times_1_minus_p_not_1_minus_p() -> None:
    report = CapabilityReport(train={"half": {"2": cell(16, 8)}, "never": {"2": cell(16, 0)},
                                     "always": {"2": cell(16, 16)}, "rare": {"2": cell(16, 2)}})
    families = ["half", "never", "always", "rare", "unknown"]
    budget = split_budget(report, 60, families, levels={f: 2 for f in families})
    assert sum(budget.values()) == 60
    assert budget["half"] == max(budget.values())  # 8/16: a group's rewards differ most often
    assert budget["never"] == budget["always"]  # 0 and 1 are alike: no variance either way
    assert budget["half"] > budget["unknown"] > budget["rare"] > budget["never"] >= 1  # the prior: 1/6
    assert budget["never"] >= budget["half"] // 10  # the floor keeps a hopeless family in the round
    # evidence at another level does not count for the level the family is synthesized at
    moved = split_budget(report, 60, families, levels={**{f: 2 for f in families}, "always": 3})
    assert moved["always"] == moved["unknown"]
    assert expected_variance(0, 0) == 1 / 6 and abs(expected_variance(50, 100) - 0.25) < 0.01
    assert expected_variance(0, 1000) == 0.025


def test_agent_based_band(store) -> None:  # noqa: ANN001
    from appliance.schemas import Split, Task, TaskStatus
    from appliance.tasks.pool import band_status, record_band

    assert [band_status(p, 4) for p in (0, 1, 3, 4)] == [TaskStatus.TOO_HARD, TaskStatus.LEARNABLE,
                                                          TaskStatus.LEARNABLE, TaskStatus.TOO_EASY]
    assert band_status(1, 4, (0.3, 0.9)) == TaskStatus.TOO_HARD
    store.add_task(Task("t1", "r", "files", 1, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}))
    store.set_task_status("t1", TaskStatus.VALID)
    assert record_band(store, "t1", 2, 4) == TaskStatus.LEARNABLE
    assert record_band(store, "t1", 4, 4) == TaskStatus.TOO_EASY
    t = store.get_task("t1")
    assert (t.status, t.pass_rate) == (TaskStatus.TOO_EASY, 1.0)


# --- the climbing controller -------------------------------------------------------------------------
from appliance.tasks.difficulty import decide, replay_pool, size_round, wilson  # noqa: E402


def train(iteration: int, cells: dict, band_levels: dict | None = None) -> CapabilityReport:
    return CapabilityReport(iteration=iteration, band_levels=band_levels or {},
                            train={f: {str(lvl): cell(n, p) for lvl, (n, p) in c.items()} for f, c in cells.items()})


def test_wilson_matches_known_values() -> None:
    low, high = wilson(8, 10)
    assert abs(low - 0.4902) < 1e-3 and abs(high - 0.9433) < 1e-3
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(12, 12)[0] > 0.75 and wilson(0, 12)[1] < 0.25


def test_evidence_is_pooled_over_the_window_and_judged_by_the_lower_bound() -> None:
    # 4/4 at T=0.7 is not mastery (lower bound 0.51 > 0.5 would be; here 3/4 twice is not)...
    one = [train(1, {"files": {1: (4, 3)}})]
    assert decide(one, {"files": 1}, {})["files"].level == 1
    # ... but the same rate pooled over three iterations is
    three = [train(i, {"files": {1: (4, 4) if i != 2 else (4, 3)}}) for i in (1, 2, 3)]
    d = decide(three, {"files": 1}, {}, window=3)["files"]
    assert (d.level, d.mastered, d.n, d.passed) == (2, 1, 12, 11)
    assert "mastered L1" in d.reason and "iterations 1-3" in d.reason and "moves up to L2" in d.reason
    # the window drops old evidence
    assert decide(three, {"files": 1}, {}, window=1)["files"].n == 4


def test_mastery_counts_unhinted_practice_and_older_reports_fall_back_to_all_practice() -> None:
    hinted_wins = train(1, {"files": {2: (12, 12)}})
    hinted_wins.train_bare = {"files": {"2": {"n": 4, "passed": 0}}}
    d = decide([hinted_wins], {"files": 2}, {})["files"]
    assert (d.level, d.n, d.passed) == (2, 4, 0) and "unhinted practice" in d.reason
    assert decide([train(1, {"files": {2: (12, 12)}})], {"files": 2}, {})["files"].level == 3  # no train_bare


def test_never_demoted_below_a_mastered_level_and_the_reason_says_why() -> None:
    failing = [train(4, {"text": {2: (12, 0)}})]
    d = decide(failing, {"text": 2}, {"text": 1})["text"]
    assert d.level == 2 and d.mastered == 1
    assert "nothing passes yet" in d.reason and "never below L2" in d.reason
    assert decide([train(1, {"text": {1: (2, 2)}})], {"text": 1}, {})["text"].reason.startswith(
        "stays at L1: too little evidence")


def test_per_level_band_counts_and_the_heldout_eval_is_never_evidence() -> None:
    easy = train(2, {}, {"git": {"3": {"too_easy": 3}}})
    assert decide([easy], {"git": 3}, {"git": 2})["git"].level == 4
    mixed = train(2, {}, {"git": {"3": {"too_easy": 3, "learnable": 1}}})
    assert decide([mixed], {"git": 3}, {"git": 2})["git"].level == 3
    baseline = CapabilityReport(iteration=0, heldout={"data": {"1": cell(8, 8)}})
    d = decide([baseline], {"data": 1}, {})["data"]
    assert d.level == 1 and d.n == 0 and "too little evidence" in d.reason and "iteration 0" in d.reason


def test_round_is_sized_to_the_families_with_a_level_mix() -> None:
    fams = ["files", "text", "data", "git"]
    plan = size_round(fams, {"files": 1, "text": 2, "data": 5, "git": 1}, tasks_per_iteration=8, per_family=4,
                      stretch_share=0.25, replay_share=0.25, replay_available={"files": 5, "text": 0})
    by = {p.family: p for p in plan}
    assert all(p.total >= 3 for p in plan)
    assert (by["files"].new, by["files"].stretch, by["files"].replay) == (2, 1, 1)
    assert (by["text"].new, by["text"].stretch, by["text"].replay) == (3, 1, 0)  # nothing to replay
    assert by["data"].stretch == 0  # nothing above level 5
    assert sum(p.total for p in size_round(fams, {}, tasks_per_iteration=40)) >= 40


def test_replay_pool_keeps_learnable_tasks_until_mastered(store) -> None:  # noqa: ANN001
    from appliance.schemas import Split, Task, TaskStatus

    def task(tid: str, spec_id: str, family: str, level: int, status: TaskStatus, t: float) -> Task:
        return Task(tid, "r", family, level, "procedural", Split.TRAIN, status, {"id": spec_id}, created_at=t,
                    pass_rate=0.5)

    tasks = [task("a", "A", "files", 1, TaskStatus.LEARNABLE, 1), task("a.r2", "A", "files", 1, TaskStatus.TOO_EASY, 2),
             task("b", "B", "files", 2, TaskStatus.LEARNABLE, 1), task("c", "C", "files", 1, TaskStatus.LEARNABLE, 1),
             task("d", "D", "files", 3, TaskStatus.LEARNABLE, 1), task("e", "E", "text", 1, TaskStatus.TOO_HARD, 1)]
    pool = replay_pool(tasks, {"files": 2, "text": 1})
    assert [t.id for t in pool["files"]] == ["b", "c"]  # A mastered; D above the frontier; frontier first
    assert "text" not in pool
