"""Issue 47: a task whose verifier silences its own validation (stops or kills its launcher, the shell that
drives the sandbox, or every process it may signal) is rejected, once, with the reason stored, and is not
validated again at the next admission (each such validation used to end as an infra error, which leaves the
task `proposed`: 93 s of validation at every admission)."""

from __future__ import annotations

import pytest

from appliance.config import Settings
from appliance.schemas import TaskStatus
from appliance.store import Store
from appliance.tasks import TaskSpec
from appliance.tasks.validate import admit

pytestmark = pytest.mark.slow  # real Podman

# Signals every process it may (the launcher's, by name and as its parent, and its own uid's: the driving
# shell among them), then fails, on the untouched workspace and after the reference alike.
SILENCER = ("import os, signal\n"
            "targets = [os.getppid()]\n"
            "for p in os.listdir('/proc'):\n"
            "    if p.isdigit() and int(p) not in (os.getpid(), 1):\n"
            "        targets.append(int(p))\n"
            "for p in targets:\n"
            "    try:\n"
            "        os.kill(p, signal.SIG{sig})\n"
            "    except OSError:\n"
            "        pass\n"
            "raise SystemExit(0 if os.path.exists('a.txt') and os.getenv('NEVER') else 1)\n")


@pytest.mark.parametrize("sig", ["STOP", "KILL", "TERM"])
def test_a_verifier_that_silences_its_validation_is_rejected_once(sandbox_settings: Settings, store: Store,
                                                                   sig: str) -> None:
    spec = TaskSpec(id=f"sp-silence-{sig.lower()}", family="files", difficulty=1, instruction="Write hi into a.txt.",
                    verify=SILENCER.format(sig=sig), verify_lang="python", solution="echo hi > a.txt\n",
                    source="self_proposed")
    ((_, first),) = admit(sandbox_settings, store, [spec], parallel=1)
    assert not first.ok and not first.infra, first.reason
    task = store.get_task(spec.id)
    assert task.status == TaskStatus.REJECTED and task.reject_reason == first.reason
    assert admit(sandbox_settings, store, [spec], parallel=1) == []  # decided: not validated again
