"""Every table-driven operation validates in real sandboxes: untouched fails, reference passes twice.

One sample per (operation, trap) plus a hinted one per operation at its highest level, in one
`validate_many` batch (sandboxes reused), so the sweep stays a few minutes on two cores."""

from __future__ import annotations

import os
import random

import pytest

from appliance.config import Settings
from appliance.tasks import validate as v
from appliance.tasks.families import all_ops
from appliance.tasks.families._ops import render

pytestmark = pytest.mark.slow  # real Podman


def op_samples() -> list:
    specs = []
    for o in all_ops():
        top = max(lvl for lvl in o.levels if lvl <= 4)
        rng = random.Random(f"opsweep:{o.name}")
        specs.append(render(o, 0, top, rng))
        specs += [render(o, len(o.phrasings) - 1, top, rng, trap=t, hint="partial") for t in o.traps]
        if 1 in o.levels:
            specs.append(render(o, 0, 1, rng))
    return specs


@pytest.mark.skipif(os.environ.get("APPLIANCE_TASK_SWEEP", "1") == "0", reason="APPLIANCE_TASK_SWEEP=0")
@pytest.mark.timeout(1800)
def test_every_operation_and_trap_passes_validation(sandbox_settings: Settings) -> None:
    specs = op_samples()
    results = v.validate_many(sandbox_settings, specs, parallel=3)
    print(f"{len(specs)} tasks from {len(all_ops())} operations validated")
    bad = [(s.meta["operation"], s.meta.get("trap"), s.difficulty, r.reason)
           for s, r in zip(specs, results, strict=True)
           if not r.ok]
    assert bad == []


def test_the_absent_trap_tools_are_absent_from_the_sandbox(sandbox_settings: Settings, tmp_path) -> None:
    # If the image ever gains one of these, its `absent` trap stops being a trap: change the op's tool.
    from appliance.sandbox import Sandbox

    tools = sorted({o.absent for o in all_ops() if o.absent})
    assert tools
    probe = "".join(f"command -v {t} >/dev/null && echo present:{t}; " for t in tools) + "command -v python3"
    with Sandbox.start(sandbox_settings, workspace=tmp_path) as sb:
        r = sb.exec(["bash", "-c", probe], timeout=30)
    assert "present:" not in r.stdout and "python3" in r.stdout, r.stdout
