"""`loop.warmstart_first`: the first iteration of a run without trained weights learns from its
demonstrations before it practises, instead of spending practice on a base model that cannot yet answer."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from appliance.config import Settings
from appliance.loop import Loop
from appliance.phases.practise import practise, warmstart_first
from appliance.schemas import Checkpoint, Demonstration
from appliance.store import Store
from appliance.testing import FakeEngine


def _loop(settings: Settings, store: Store) -> Loop:
    settings.loop.families = ["files"]
    practice = SimpleNamespace(stopping=threading.Event())  # no rollout may start: none is set up
    return Loop(settings, store, FakeEngine(), practice, log=lambda _: None)


def _demonstration(run_id: str, level: int) -> Demonstration:
    return Demonstration(run_id, None, "files", level, "reference", [{"role": "assistant", "content": "DONE"}],
                         [1, 2], [0, 1], f"digest-{level}", 1)


def test_the_first_iteration_skips_practice_when_the_warm_start_has_demonstrations(settings: Settings,
                                                                                   store: Store) -> None:
    lp = _loop(settings, store)
    run = lp.run.id
    assert not warmstart_first(lp.context, 1)  # no demonstrations of the warm-start levels yet: practise
    store.add_demonstration(_demonstration(run, settings.training.demo_warmstart_levels[0]))
    assert warmstart_first(lp.context, 1) and not warmstart_first(lp.context, 2)
    practise(lp.context, 1)  # returns before any rollout: the fake practice could not run one
    assert not store.rollouts(run, iteration=1) and any(
        "the warm-start SFT comes first" in e.message for e in store.events(run))
    store.add_checkpoint(Checkpoint(run, 1, 1, "lora", "/nowhere"))
    assert not warmstart_first(lp.context, 1)  # trained weights exist: practise as usual


def test_the_setting_off_or_demonstrations_off_practise_as_before(settings: Settings, store: Store) -> None:
    lp = _loop(settings, store)
    store.add_demonstration(_demonstration(lp.run.id, settings.training.demo_warmstart_levels[0]))
    settings.loop.warmstart_first = False
    assert not warmstart_first(lp.context, 1)
    settings.loop.warmstart_first, settings.training.demonstrations = True, False
    assert not warmstart_first(lp.context, 1)
