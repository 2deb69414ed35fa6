"""The difficulty controller reads the diagnosis report's JSON."""

from __future__ import annotations

from appliance.tasks.difficulty import next_levels, plan, split_budget


def cell(n: int, passed: int) -> dict:
    return {"n": n, "passed": passed, "pass_rate": passed / n}


REPORT = {
    "train": {"files": {"1": cell(8, 8)}, "text": {"2": cell(8, 0)}, "data": {"3": cell(8, 3)},
              "git": {"1": cell(2, 2)}},
    "heldout": {"pipeline": {"4": cell(4, 4)}},
    "band": {"script": {"too_easy": 5}, "pyfix": {"too_hard": 3}, "replace": {"learnable": 2, "too_hard": 4}},
    "family_pass_rate": {"files": 1.0, "text": 0.0, "data": 0.375, "pipeline": 1.0},
    "weak_families": ["text", "data", "files", "pipeline"],
}


def test_levels_move_one_step_on_evidence() -> None:
    current = {"files": 1, "text": 2, "data": 3, "git": 1, "pipeline": 4, "script": 2, "pyfix": 1, "replace": 3}
    assert next_levels(REPORT, current) == {
        "files": 2,  # mastered
        "text": 1,  # everything fails
        "data": 3,  # inside the band
        "git": 1,  # too little evidence
        "pipeline": 5,  # the held-out eval is the fallback evidence
        "script": 3,  # every validated task too easy
        "pyfix": 1,  # already at the bottom
        "replace": 3,  # still has learnable tasks
    }
    assert next_levels(None, {"files": 2}) == {"files": 2}
    assert next_levels(REPORT, {"files": 5}) == {"files": 5}


def test_budget_goes_to_weak_families() -> None:
    budget = split_budget(REPORT, 40, ["files", "text", "data", "pipeline", "git"])
    assert sum(budget.values()) == 40
    assert budget["text"] > budget["data"] > budget["files"] >= 1
    assert budget["git"] >= budget["text"]  # no data counts as weak
    assert sum(split_budget(None, 7, ["files", "text", "data"]).values()) == 7
    assert plan(REPORT, {"files": 1, "text": 2}, 10) == [("files", 2, 1), ("text", 1, 9)]


def test_agent_based_band(store) -> None:  # noqa: ANN001
    from appliance.schemas import Split, Task, TaskStatus
    from appliance.tasks.validate import band_status, record_band

    assert [band_status(p, 4) for p in (0, 1, 3, 4)] == [TaskStatus.TOO_HARD, TaskStatus.LEARNABLE,
                                                          TaskStatus.LEARNABLE, TaskStatus.TOO_EASY]
    assert band_status(1, 4, (0.3, 0.9)) == TaskStatus.TOO_HARD
    store.add_task(Task("t1", "r", "files", 1, "procedural", Split.TRAIN, TaskStatus.PROPOSED, {}))
    store.set_task_status("t1", TaskStatus.VALID)
    assert record_band(store, "t1", 2, 4) == TaskStatus.LEARNABLE
    assert record_band(store, "t1", 4, 4) == TaskStatus.TOO_EASY
    t = store.get_task("t1")
    assert (t.status, t.pass_rate) == (TaskStatus.TOO_EASY, 1.0)
