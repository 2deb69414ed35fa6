"""Fakes for unit tests and benchmarks; nothing in the product imports this package.

Each fails loudly when the calls it gets disagree with its script or with the contract of the part it
stands in for. Fixtures (a tiny model, a recorded run) live in tests/.
`appliance.testing.train_worker` (a trainer worker that fails on one rank) is a module a test launches, and
`appliance.testing.instant_engine` (an engine stand-in that answers at once, for the proxy's tests and its
benchmark) a server: neither is imported here.
"""

from appliance.testing.control import ControlConsumer
from appliance.testing.policy import (
    IM_END,
    IM_START,
    Reply,
    ScriptDivergence,
    ScriptedPolicy,
    ScriptedText,
    chatml_completion_ids,
    chatml_ids,
)
from appliance.testing.shell import FakeClock, FakeResult, FakeShell
from appliance.testing.training import FAILING_TRAIN_WORKER, FakeEngine

__all__ = ["FAILING_TRAIN_WORKER", "IM_END", "IM_START", "ControlConsumer", "FakeClock", "FakeEngine", "FakeResult",
           "FakeShell", "Reply", "ScriptDivergence", "ScriptedPolicy", "ScriptedText", "chatml_completion_ids",
           "chatml_ids"]
