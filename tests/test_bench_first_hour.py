"""`scripts/bench first-hour` reads where a run's first hour went from the store: phases, the first trained
held-out point, the engine's busy share and tokens/s (issue 49)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.practice import new_rollout
from appliance.schemas import Event, ModelCall, Outcome
from appliance.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench_first_hour  # noqa: E402


def test_engine_use_is_the_union_of_the_calls_spans_and_their_tokens() -> None:
    calls = [(0.0, 4.0, 40), (2.0, 6.0, 20), (8.0, 9.0, 10), (12.0, 30.0, 99)]  # (begin, end, completion tokens)
    use = bench_first_hour.engine_use(calls, 0.0, 10.0)
    assert use["busy"] == pytest.approx(0.7)  # [0, 6] and [8, 9] of 10 s; overlap counted once
    assert use["in_flight"] == pytest.approx(0.9)  # 4 + 4 + 1 call-seconds over 10 s
    assert use["tok_s"] == pytest.approx(7.0) and use["calls"] == 3  # the call ending at 30 s is not this window's


def test_report_names_the_phases_minutes_and_the_first_trained_point(settings: Settings, store: Store,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    store.create_run("r", {})
    t0 = 1_800_000_000.0

    def at(kind: str, message: str, when: float, duration: float | None = None, **data: object) -> None:
        store.add_event(Event(kind, message, "r", dict(data), duration, created_at=t0 + when))

    at("engine", "starting", 0)
    at("phase", "evaluate", 60, iteration=0)
    at("evaluate", "iteration 0: held-out pass@1 0.0% [0.0%, 4.1%] (0/90) over 45 tasks x 2", 600)
    at("info", "iteration 0: evaluate done", 660, 600, iteration=0, phase="evaluate")
    at("phase", "synthesize", 670, iteration=1)
    at("error", "iteration 1 synthesize failed: ReadTimeout: timed out (attempt 1 of 3)", 690)
    at("phase", "train", 700, iteration=1)
    at("info", "iteration 1: train done", 1300, 600, iteration=1, phase="train")
    at("phase", "evaluate", 1300, iteration=1)
    at("evaluate", "iteration 1: held-out pass@1 18.0% [10.0%, 30.0%] (9/50) over 25 tasks x 2", 1780)
    r = new_rollout(store, harness="builtin", policy_version=0, run_id="r", iteration=0, purpose="eval",
                    rollout_id="a")
    store.start_rollout(r.id)
    store.add_model_call(ModelCall(None, r.id, 0, "ok", {}, {}, [1, 2], [3, 4, 5], [0.0] * 3, 0, 30.0,
                                   created_at=t0 + 130))
    store.finish_rollout(r.id, Outcome.FAILURE, 0.0, error="turn_limit: 8 calls")
    with store.write() as c:  # its wall times inside the baseline's evaluation
        c.execute("UPDATE rollouts SET started_at = ?, finished_at = ? WHERE id = ?", (t0 + 100, t0 + 140, r.id))
    result = bench_first_hour.report(settings.home, "new")
    out = capsys.readouterr().out
    assert result["first_trained_point_min"] == pytest.approx(1780 / 60)
    assert "29.7 min after the start: iteration 1: held-out pass@1 18.0% [10.0%, 30.0%]" in out
    phases = {(p["iteration"], p["phase"]): p for p in result["phases"]}
    assert phases[(0, "evaluate")]["minutes"] == pytest.approx(10.0) and phases[(1, "train")]["done"]
    assert not phases[(1, "evaluate")]["done"]  # no `done` event yet: still running, starred
    assert not phases[(1, "synthesize")]["done"]  # a failed attempt ends where the next phase run starts
    assert phases[(1, "synthesize")]["minutes"] == pytest.approx(0.5)
    assert phases[(0, "evaluate")]["busy"] == pytest.approx(30 / 600)
    assert phases[(0, "evaluate")]["cut"] == 1 and phases[(1, "train")]["rollouts"] == 0
