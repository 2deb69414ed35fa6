"""Self-proposal: forgiving parsing of a small model's text; only validated proposals enter the pool."""

from __future__ import annotations

import threading

import pytest

from appliance.config import Settings
from appliance.schemas import CapabilityReport, Split, TaskStatus
from appliance.store import Store
from appliance.tasks.propose import parse_proposal, propose_tasks, sections, targets
from appliance.tasks.validate import REFERENCE_FAILS, UNTOUCHED_PASSES, admit
from appliance.testing import ScriptDivergence, ScriptedText

GOOD = """Sure! Here is a new task for you.
**INSTRUCTION:** Count the lines of data.txt and write the number into n.txt.
Setup:
```bash
printf 'a\\nb\\nc\\n' > data.txt
```
## Verify
```python
import sys
sys.exit(0 if open('n.txt').read().strip() == '3' else 1) if __import__('os').path.exists('n.txt') else sys.exit(1)
```
SOLUTION
```
wc -l < data.txt > n.txt
```
I hope this helps!"""

GOOD_BARE = """INSTRUCTION: Make a directory named box.
VERIFY: test -d box
SOLUTION: mkdir box"""

BROKEN_REFERENCE = """INSTRUCTION
```text
Write hello into h.txt
```
VERIFY
```bash
grep -qx hello h.txt
```
SOLUTION
```bash
echo goodbye > h.txt
```"""

PASSES_UNTOUCHED = """INSTRUCTION
Do nothing at all.
VERIFY
```bash
true
```
SOLUTION
```bash
true
```"""

NO_VERIFIER = "INSTRUCTION: write a poem\nSOLUTION: echo poem > p.txt\nThe end."


def test_sections_tolerate_junk_and_header_styles() -> None:
    sec = sections(GOOD)
    assert sec["instruction"][1] == "Count the lines of data.txt and write the number into n.txt."
    assert sec["setup"] == ("bash", "printf 'a\\nb\\nc\\n' > data.txt")
    assert sec["verify"][0] == "python" and sec["solution"][1] == "wc -l < data.txt > n.txt"
    assert sections(GOOD_BARE) == {"instruction": ("", "Make a directory named box."),
                                   "verify": ("", "test -d box"), "solution": ("", "mkdir box")}
    assert "verify" not in sections("INSTRUCTION: x\nVerify that the file exists, please.\nSOLUTION: y")


def test_unparseable_proposals_are_dropped() -> None:
    assert parse_proposal(NO_VERIFIER, "text", 1) is None
    assert parse_proposal("", "text", 1) is None
    spec = parse_proposal(GOOD, "pipeline", 2)
    assert spec and spec.source == "self_proposed" and spec.verify_lang == "python" and spec.difficulty == 2


def test_prompts_aim_at_the_weak_families() -> None:
    report = CapabilityReport(weak_families=["git", "pyfix", "text", "files"])
    assert [f for f, _ in targets(report, 4, {"git": 3})] == ["git", "pyfix", "text", "git"]
    assert targets(report, 1, {"git": 3}) == [("git", 3)]
    policy = ScriptedText([GOOD_BARE, NO_VERIFIER])
    specs = propose_tasks(policy, report, 2)
    assert len(specs) == 1 and "git" in policy.prompts[0] and "pyfix" in policy.prompts[1]
    with pytest.raises(ScriptDivergence):
        policy("one call too many")


def test_proposals_are_asked_at_once_and_come_back_in_the_order_asked() -> None:
    report = CapabilityReport(weak_families=["git", "pyfix", "text"])
    meeting = threading.Barrier(3, timeout=10)  # three calls must be in flight together, or this breaks
    seen: list[tuple[int | None, float | None]] = []

    def policy(prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        seen.append((max_tokens, temperature))
        meeting.wait()
        family = next(f for f in ("git", "pyfix", "text") if f"kind: {f} " in prompt)
        return GOOD_BARE.replace("Make a directory named box.", f"A {family} task.")

    specs = propose_tasks(policy, report, 3, max_tokens=512, temperature=0.7, workers=3)
    assert [s.family for s in specs] == ["git", "pyfix", "text"]
    assert [s.instruction for s in specs] == ["A git task.", "A pyfix task.", "A text task."]
    assert seen == [(512, 0.7)] * 3


@pytest.mark.slow
def test_only_valid_proposals_enter_the_pool(sandbox_settings: Settings, store: Store) -> None:
    policy = ScriptedText([GOOD, BROKEN_REFERENCE, NO_VERIFIER, PASSES_UNTOUCHED, GOOD_BARE])
    specs = propose_tasks(policy, CapabilityReport(weak_families=["pipeline"]), 5)
    assert policy.done() and len(specs) == 4
    results = admit(sandbox_settings, store, specs, run_id="r1")
    verdicts = {s.instruction: (r.ok, r.reason) for s, r in results}
    assert verdicts["Count the lines of data.txt and write the number into n.txt."] == (True, None)
    assert verdicts["Make a directory named box."] == (True, None)
    assert REFERENCE_FAILS in verdicts["Write hello into h.txt"][1]
    assert verdicts["Do nothing at all."][1] == UNTOUCHED_PASSES
    pool = store.training_tasks("r1", status=TaskStatus.VALID)
    assert sorted(t.spec["instruction"] for t in pool) == [
        "Count the lines of data.txt and write the number into n.txt.", "Make a directory named box."]
    assert all(t.source == "self_proposed" and t.split == Split.TRAIN for t in pool)
    assert len(store.tasks("r1", status=TaskStatus.REJECTED)) == 2
