"""Issue 54: the overview shows the learning signal of the newest iterations' reports (the real app under Pilot)."""

from __future__ import annotations

import pytest

from appliance.learning_signal import LearningSignal
from appliance.schemas import CapabilityReport
from appliance.store import Store
from appliance.tui.overview import signal_lines


@pytest.mark.anyio
async def test_the_overview_shows_each_iterations_learning_signal(recorded_store: Store, make_app, settle) -> None:
    store = recorded_store
    warm = LearningSignal(1, warmstart=True, demonstrations=405, sft_steps=51, sft_tokens=24_300, sft_loss=0.4)
    later = LearningSignal(2, groups=33, signal_groups=14, sampled_tokens=25_100, rl_steps=2, rl_samples=144,
                           rl_trained_tokens=4_400, entropy=0.035, sft_steps=105, sft_tokens=12_000)
    for s in (warm, later):
        store.save_report("demo", s.iteration, CapabilityReport(iteration=s.iteration, learning_signal=s.as_dict()),
                          "# report")
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        shown = str(app.screen.query_one("#ov-curves").render())
    assert "learning signal  it 1: no practice · warm-start on 405 demos 24.3k tok" in shown
    assert "it 2: signal 14/33 groups · RL 4.4k/25.1k tok · SFT 12.0k tok · entropy 0.035" in shown


def test_reports_without_the_block_add_no_line(recorded_store: Store) -> None:
    assert signal_lines(recorded_store, "demo") == []  # the recorded run's reports predate it
