"""The terminal UI: watch and steer a running appliance over SSH (`appliance tui`).

It only reads the store and sends control requests (`appliance.control`); it never trains or starts
sandboxes itself, so it can be opened, closed and reopened at any time without touching the run.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from appliance.config import Settings


def run_tui(settings: Settings, *, run_id: str | None = None, refresh_s: float = 0.5, detach: bool = False,
            until: threading.Event | None = None) -> None:
    """Show the TUI until the user quits it (or `until` is set). `detach=True` is `appliance run`'s own
    window: its q reads "Detach", because the run goes on after it closes, and what the run writes while
    the window is up goes to logs/run-output.log instead of across the screen."""
    from appliance.store import Store
    from appliance.tui.app import ApplianceApp
    from appliance.tui.trajectory import tokenizer_decoder

    def app(print_log: BinaryIO | None = None) -> ApplianceApp:
        return ApplianceApp(lambda: Store(settings.db_path), run_id=run_id, refresh_s=refresh_s, detach=detach,
                            until=until, decoder_factory=lambda: tokenizer_decoder(settings.model_path),
                            print_log=print_log)

    if not detach:
        app().run()
        return
    log_path = settings.home / "logs" / "run-output.log"
    size = log_path.stat().st_size if log_path.exists() else 0
    with output_aside(log_path) as log:
        app(log).run()
    if log_path.stat().st_size > size:
        print(f"what the run wrote while the TUI was open is in {log_path}", file=sys.stderr)


@contextmanager
def output_aside(log_path: Path) -> Iterator[BinaryIO]:
    """While the run's TUI is up, keep the run's own output off the screen.

    Textual draws on `sys.__stderr__`, and in `appliance run` the loop's threads, the children they start
    and native libraries (torch, OpenMP) write to file descriptor 2 too: one stray line there lands in the
    middle of the picture. So for the TUI's lifetime Textual draws on a copy of stdout (the terminal
    `appliance run` checked) and fd 2 points at `log_path`. Yields the open log, where the app appends
    what Python code prints meanwhile (Textual captures that; it would be lost otherwise).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - closed below, after fd 2 is back
    saved_fd2, saved_stderr = os.dup(2), sys.__stderr__
    screen = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace")
    try:
        os.dup2(log.fileno(), 2)
        sys.__stderr__ = screen  # type: ignore[misc]  # textual's driver writes to it; typeshed calls it Final
        yield log
    finally:
        sys.__stderr__ = saved_stderr  # type: ignore[misc]
        os.dup2(saved_fd2, 2)
        os.close(saved_fd2)
        screen.close()
        log.close()

