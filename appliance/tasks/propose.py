"""Self-proposal: the policy writes new tasks for its weak families; validation decides whether they live.

The policy is a plain callable prompt -> text (the loop binds it to the engine). A small model writes
messy text, so parsing is forgiving: section headers INSTRUCTION / SETUP / VERIFY / SOLUTION in any case,
with or without '#', '**' or a colon; each section's content is its first fenced block, or its bare text
when there is no fence; anything before the first header is ignored. A proposal without an instruction,
a verifier or a solution is dropped here; the rest goes through `admit` (agent-free validation), which
stores every proposal with its verdict so only valid ones reach the training pool.
"""

from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor

from appliance.schemas import CapabilityReport
from appliance.seams import PolicyText
from appliance.tasks.families import FAMILIES
from appliance.tasks.format import Limits, TaskSpec

PROMPT = """You write practice tasks for an agent that works in a Linux shell, in the directory /workspace.
Write ONE new task of this kind: {family} ({description}), difficulty {level} of 5.
Use exactly four sections, each with a fenced block:

INSTRUCTION
```text
Create a file named hello.txt containing the word hi.
```
SETUP
```bash
echo start > notes.txt
```
VERIFY
```bash
grep -qx hi hello.txt
```
SOLUTION
```bash
echo hi > hello.txt
```

SETUP prepares the files (no internet). VERIFY exits 0 only when the task is done. SOLUTION does the task.
Now write a different {family} task:
"""

_HEADER = re.compile(
    r"^[\s#*>_`-]*(instruction|setup|verify|verifier|verification|solution)s?\b[\s*_`]*(:?)[\s*_`-]*(.*)$", re.I)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_KEYS = {"instruction": "instruction", "setup": "setup", "verify": "verify", "verifier": "verify",
         "verification": "verify", "solution": "solution"}


def sections(text: str) -> dict[str, tuple[str, str]]:
    """{section: (language, content)} from a model's text; the first occurrence of a section wins."""
    raw: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        m = _HEADER.match(line)
        # a header is the bare word ("## Setup") or the word and a colon ("VERIFY: grep ..."), not prose
        if m and (m.group(2) or not m.group(3).strip()):
            key = _KEYS[m.group(1).lower()]
            current = key if key not in raw else None  # a repeated section is junk: skip it
            if current:
                raw[current] = [m.group(3).rstrip("*_` ")] if m.group(3).strip() else []
            continue
        if current:
            raw[current].append(line)
    out = {}
    for key, lines in raw.items():
        body = "\n".join(lines)
        fence = _FENCE.search(body)
        if fence:
            lang, content = fence.group(1).lower(), fence.group(2)
        else:
            lang, content = "", "\n".join(ln for ln in lines if not ln.strip().startswith("```"))
        content = content.strip("\n")
        if content.strip():
            out[key] = (lang, content)
    return out


def parse_proposal(text: str, family: str, level: int) -> TaskSpec | None:
    """A TaskSpec from what the model wrote, or None when a required section is missing."""
    sec = sections(text)
    if not all(k in sec for k in ("instruction", "verify", "solution")):
        return None
    instruction = " ".join(sec["instruction"][1].split()) if "\n" not in sec["instruction"][1].strip() \
        else sec["instruction"][1].strip()
    vlang, verify = sec["verify"]
    python = vlang in ("python", "python3", "py") or \
        verify.lstrip().startswith(("import ", "from ", "#!/usr/bin/env python"))
    setup = sec.get("setup", ("", ""))[1]
    solution = sec["solution"][1]
    digest = hashlib.sha256(json.dumps([family, level, instruction, setup, verify, solution]).encode()).hexdigest()[:12]
    return TaskSpec(
        id=f"sp-{family}-{level}-{digest}", family=family, difficulty=level, instruction=instruction,
        verify=verify + "\n", solution=solution + "\n", setup=setup + "\n" if setup.strip() else "",
        verify_lang="python" if python else "bash", source="self_proposed",
        limits=Limits(max_turns=4 + 2 * level, command_timeout_s=30.0, setup_timeout_s=30.0),
        meta={"proposed_for": family},
    )


def targets(report: CapabilityReport | None, n: int, levels: dict[str, int] | None = None) -> list[tuple[str, int]]:
    """(family, level) for each of n proposals: the report's weakest families first, round robin."""
    weak = [f for f in (report.weak_families if report else []) if f in FAMILIES][:3] or list(FAMILIES)
    levels = levels or {}
    return [(weak[i % len(weak)], levels.get(weak[i % len(weak)], 1)) for i in range(n)]


def propose_tasks(generate_text: PolicyText, report: CapabilityReport | None, n: int,
                  levels: dict[str, int] | None = None, *, max_tokens: int | None = None,
                  temperature: float | None = None, workers: int = 1) -> list[TaskSpec]:
    """Ask the policy for n tasks aimed at the weak families of `report`; returns those that parse, in the
    order asked. `workers` > 1 sends the requests at once (the engine batches them: n proposals cost about
    what one does on an idle engine).

    The result is unvalidated: pass it to `appliance.tasks.validate.admit`."""
    asked = targets(report, n, levels)

    def ask(target: tuple[str, int]) -> TaskSpec | None:
        family, level = target
        prompt = PROMPT.format(family=family, description=FAMILIES[family].DESCRIPTION, level=level)
        return parse_proposal(generate_text(prompt, max_tokens=max_tokens, temperature=temperature), family, level)

    if workers > 1 and len(asked) > 1:
        with ThreadPoolExecutor(max_workers=min(workers, len(asked)), thread_name_prefix="propose") as pool:
            specs = list(pool.map(ask, asked))
    else:
        specs = [ask(t) for t in asked]
    return [s for s in specs if s is not None]
