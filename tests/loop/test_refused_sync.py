"""Trained weights the engine refuses at their sync (issue 46, item 4): on bf16 the canary rolled back every
LEARN and the next one started again from the served version, so the run trained nothing while it looked
healthy. The refused weights are kept and trained on from, and the refusal is loud: an event, the TUI's
overview, the iteration's report."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.diagnosis import build_report
from appliance.loop import Loop
from appliance.phases import train as train_phase
from appliance.schemas import Checkpoint
from appliance.store import Store
from appliance.testing import FakeEngine
from appliance.training.learn import LearnResult, SyncRolledBack
from appliance.tui.overview import rollback_note


def test_refused_weights_are_kept_said_aloud_and_trained_on_from(settings: Settings, store: Store,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    settings.loop.families = ["files"]
    settings.training.demonstrations = False  # no hindsight, no mix: the phase goes straight to learn
    lp = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()), log=lambda _: None)
    run = lp.run.id
    resumed: list[Checkpoint | None] = []
    trained = settings.checkpoints_dir / "v1"

    def refused(*args, resume=None, **kwargs) -> LearnResult:  # learn whose sync the engine rolled back
        resumed.append(resume)
        trained.mkdir(parents=True, exist_ok=True)
        (trained / "adapter_model.safetensors").write_bytes(b"what iteration 1 learned")
        raise SyncRolledBack("canary mismatch after syncing v1: |delta| 0.5 > 0.3", "the previous weights serve on",
                             Checkpoint(run, 1, kwargs["iteration"], "lora", str(trained), {"global_step": 2.0}))

    monkeypatch.setattr(train_phase, "learn", refused)
    train_phase.train(lp.context, 1)
    kept = settings.checkpoints_dir / "v1-refused-it1"
    assert (kept / "adapter_model.safetensors").read_bytes() == b"what iteration 1 learned"
    assert not trained.exists()  # the next LEARN saves v1 again: never over what it resumes from
    [event] = store.events(run, kind="rollback")
    assert "refused the trained weights" in event.message and "0.5 > 0.3" in event.message
    assert event.data["checkpoint"] == str(kept) and event.data["iteration"] == 1

    train_phase.train(lp.context, 2)  # refused again: trained on from the first refused weights
    assert resumed[0] is None
    assert resumed[1].path == str(kept) and resumed[1].kind == "lora" and resumed[1].metrics["global_step"] == 2.0
    assert (settings.checkpoints_dir / "v1-refused-it2").is_dir()
    assert not kept.exists()  # superseded by the newer refused weights, which were trained on from it

    def published(*args, resume=None, **kwargs) -> LearnResult:
        resumed.append(resume)
        checkpoint = Checkpoint(run, 1, kwargs["iteration"], "lora", str(trained))
        store.add_checkpoint(checkpoint)
        return LearnResult(1, checkpoint)

    monkeypatch.setattr(train_phase, "learn", published)
    train_phase.train(lp.context, 3)
    assert resumed[2].path == str(settings.checkpoints_dir / "v1-refused-it2")  # the newest refused
    assert train_phase.refused_checkpoint(store, run) is None  # a published version is newer: resume from it
    assert not (settings.checkpoints_dir / "v1-refused-it2").exists()  # and its folder is no longer kept

    note = rollback_note(store, run).plain
    assert "2 syncs refused" in note and "last: iteration 2" in note
    report, markdown = build_report(store, run, 2)
    assert [r["policy_version"] for r in report.refused_syncs] == [1]
    assert "**Trained weights refused:**" in markdown and "0.5 > 0.3" in markdown
    assert not build_report(store, run, 3)[0].refused_syncs


def test_refused_weights_that_are_gone_are_no_resume_point(settings: Settings, store: Store, tmp_path: Path) -> None:
    lp = Loop(settings, store, FakeEngine(), SimpleNamespace(stopping=threading.Event()), log=lambda _: None)
    lp.context.event("rollback", "refused", checkpoint=str(tmp_path / "deleted"), weights_kind="full",
                     policy_version=1, iteration=1, metrics={})
    assert train_phase.refused_checkpoint(store, lp.run.id) is None
