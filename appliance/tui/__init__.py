"""The terminal UI: watch and steer a running appliance over SSH (`appliance tui`).

It only reads the store and sends control requests (`appliance.control`); it never trains or starts
sandboxes itself, so it can be opened, closed and reopened at any time without touching the run.
"""

from __future__ import annotations

import threading

from appliance.config import Settings


def run_tui(settings: Settings, *, run_id: str | None = None, refresh_s: float = 0.5, detach: bool = False,
            until: threading.Event | None = None) -> None:
    """Show the TUI until the user quits it (or `until` is set). `detach=True` is `appliance run`'s own
    window: its q reads "Detach", because the run goes on after it closes."""
    from appliance.store import Store
    from appliance.tui.app import ApplianceApp
    from appliance.tui.trajectory import tokenizer_decoder

    ApplianceApp(lambda: Store(settings.db_path), run_id=run_id, refresh_s=refresh_s, detach=detach, until=until,
                 decoder_factory=lambda: tokenizer_decoder(settings.model_path)).run()
