"""The terminal UI: watch and steer a running appliance over SSH (`appliance tui`).

It only reads the store and sends control requests (`appliance.control`); it never trains or starts
sandboxes itself, so it can be opened, closed and reopened at any time without touching the run.
"""

from __future__ import annotations

from appliance.config import Settings


def run_tui(settings: Settings, *, run_id: str | None = None, refresh_s: float = 0.5) -> None:
    from appliance.store import Store
    from appliance.tui.app import ApplianceApp
    from appliance.tui.trajectory import tokenizer_decoder

    ApplianceApp(lambda: Store(settings.db_path), run_id=run_id, refresh_s=refresh_s,
                 decoder_factory=lambda: tokenizer_decoder(settings.model_path)).run()
