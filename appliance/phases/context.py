"""What a phase works with: the run's settings, store, engine and practice, declared once for every phase.

The reconciler (`appliance.loop`) builds one `PhaseContext` per run and hands it to the phase the table
names; a test builds its own and calls the phase function directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.config import Settings
from appliance.demonstrations import ChatTokenizer, chat_tokenizer
from appliance.errors import Interrupted
from appliance.practice import Practice
from appliance.schemas import CapabilityReport, Event, Split, Task, TaskStatus
from appliance.seams import Engine, PolicyText
from appliance.store import Store

GenerateText = PolicyText  # the policy writing text: report analysis, self-proposal


@dataclass
class PhaseContext:
    settings: Settings
    store: Store
    run_id: str
    engine: Engine
    practice: Practice
    families: list[str]
    log: Callable[[str], None] = print
    generate_text: GenerateText | None = None  # None: no analysis, no self-proposal
    chat_tokenizer: ChatTokenizer | None = None  # demonstrations' tokenizer; None until needed: the served model's

    def event(self, kind: str, message: str, duration_s: float | None = None, **data: object) -> None:
        self.store.add_event(Event(kind, message, self.run_id, dict(data), duration_s))
        self.log(message)

    def tokenizer(self) -> ChatTokenizer:
        if self.chat_tokenizer is None:  # loading the model's tokenizer costs seconds: only when a phase asks
            self.chat_tokenizer = chat_tokenizer(self.settings.model_path)
        return self.chat_tokenizer

    def iteration_tasks(self, index: int, status: TaskStatus | None = None) -> list[Task]:
        return self.store.tasks(self.run_id, split=Split.TRAIN, status=status, iteration=index)

    def previous_report(self, index: int) -> CapabilityReport | None:
        found = self.store.report(self.run_id, index - 1) if index > 0 else None
        return found[0] if found else None

    def levels_after(self, index: int) -> dict[str, int]:
        """Each family's level as the report before iteration `index` left it (`loop.start_level` if none)."""
        levels = (self.previous_report(index) or CapabilityReport()).levels
        return {f: int(levels.get(f, self.settings.loop.start_level)) for f in self.families}

    def check_stopping(self, what: str) -> None:
        """Raise Interrupted when a shutdown began while `what` ran: its failures are the shutdown's."""
        if self.practice.stopping.is_set():
            raise Interrupted(f"{what} ran into the shutdown")
