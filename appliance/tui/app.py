"""The Textual app: six screens over the store, switched with the number keys.

Everything the app touches from outside comes in through `ApplianceApp(...)`: a store factory (tests
hand in a fixture store), a system probe, a clock and a token decoder factory, so the same app runs
against a live appliance over SSH and against a recorded run in a snapshot test.

Opened by `appliance run` (`detach=True`) the app is a window onto the run in the same process, not its
owner: q (or ctrl+q) closes the window and the run goes on headless; only `until` (set by SIGTERM)
closes it from outside. A tired key press at 2 a.m. never ends a night's training.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import BinaryIO

from textual import events
from textual.app import App
from textual.binding import Binding

from appliance.schemas import Run
from appliance.store import Store
from appliance.tui.controls import ControlsScreen
from appliance.tui.curves import CurvesScreen
from appliance.tui.overview import OverviewScreen
from appliance.tui.reports import ReportsScreen
from appliance.tui.rollouts import RolloutsScreen
from appliance.tui.system import system_probe
from appliance.tui.tasks import TasksScreen
from appliance.tui.trajectory import Decoder

StoreFactory = Callable[[], Store]
# The live loop's steering thread answers a control request within a beat or two, whatever phase runs;
# with no live loop (no fresh heartbeat) `control.request` says so at once. This bounds a loop that is
# alive but stuck on the store.
CONTROL_TIMEOUT_S = 60.0


class ApplianceApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "appliance"
    ENABLE_COMMAND_PALETTE = False  # its footer entry would crowd out bindings at 80 columns
    MODES = {
        "overview": OverviewScreen,
        "tasks": TasksScreen,
        "rollouts": RolloutsScreen,
        "reports": ReportsScreen,
        "controls": ControlsScreen,
        "curves": CurvesScreen,
    }
    DEFAULT_MODE = "overview"
    BINDINGS = [
        Binding("1", "switch_mode('overview')", "Overview"),
        Binding("2", "switch_mode('tasks')", "Tasks"),
        Binding("3", "switch_mode('rollouts')", "Rollouts"),
        Binding("4", "switch_mode('reports')", "Reports"),
        Binding("5", "switch_mode('controls')", "Controls"),
        Binding("6", "switch_mode('curves')", "Curves"),
    ]  # and q: Quit, or Detach in `appliance run`'s own window (set in __init__)

    def __init__(self, store_factory: StoreFactory, *, run_id: str | None = None, refresh_s: float = 0.5,
                 probe: Callable[[], str] = system_probe, clock: Callable[[], float] = time.time,
                 decoder_factory: Callable[[], Decoder | None] = lambda: None,
                 control_timeout_s: float = CONTROL_TIMEOUT_S, detach: bool = False,
                 until: threading.Event | None = None, print_log: BinaryIO | None = None) -> None:
        super().__init__()
        self.print_log = print_log
        self.detach = detach
        self.until = until
        self.bind("q", "quit", description="Detach" if detach else "Quit")
        self.store_factory = store_factory
        self.run_id = run_id
        self.refresh_s = refresh_s
        self.probe = probe
        self.clock = clock
        self.control_timeout_s = control_timeout_s
        self._decoder_factory = decoder_factory
        self._store: Store | None = None
        self._decoder: Decoder | None = None
        self._decoder_loaded = False
        self._lock = threading.Lock()

    def on_mount(self) -> None:
        if self.until is not None:
            self.set_interval(0.2, self._check_until)
        if self.print_log is not None:  # what the run's Python code prints while the app runs
            self.begin_capture_print(self, stdout=True, stderr=True)

    def on_print(self, event: events.Print) -> None:
        if self.print_log is None:
            return
        text = event.text  # click.echo hands over bytes, print() str
        try:
            self.print_log.write(text if isinstance(text, bytes) else text.encode("utf-8", "replace"))
        except OSError:  # a full disk must not take the window down; the run's events are in the store
            pass

    def _check_until(self) -> None:
        if self.until is not None and self.until.is_set():
            self.exit()

    def open_store(self) -> Store:
        """The store, opened on first use from a worker thread (opening may wait on a migration)."""
        with self._lock:
            if self._store is None:
                self._store = self.store_factory()
            return self._store

    def current_run(self, store: Store) -> Run | None:
        """The run asked for on the command line, else the newest one (so a run started later shows up)."""
        return store.get_run(self.run_id) if self.run_id else store.latest_run()

    def decoder(self) -> Decoder | None:
        """The token decoder, loaded on first use from a worker thread (a tokenizer load takes seconds)."""
        with self._lock:
            if not self._decoder_loaded:
                self._decoder = self._decoder_factory()
                self._decoder_loaded = True
            return self._decoder
