"""The appliance process's start-up: what it refuses before starting anything, and what it says."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.app import services, template_line
from appliance.config import load_settings
from appliance.errors import ApplianceError


def test_a_run_without_its_sandbox_image_is_refused_before_the_engine_starts(tmp_path: Path) -> None:
    """Before: the run started, every validation and rollout was an infra error ("sandbox image ... is not
    built"), and it reported itself done after its iterations with nothing validated, evaluated or trained."""
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path / "home"),
                                      "APPLIANCE_PODMAN__GRAPHROOT": str(tmp_path / "storage")})
    with pytest.raises(ApplianceError, match="is not built") as e, services(settings, store=None):  # type: ignore[arg-type]
        pass
    assert "appliance init" in e.value.hint


def test_start_up_says_what_the_chat_template_is(tmp_path: Path) -> None:
    bundled = load_settings().model_path
    if not (bundled / "tokenizer.json").exists():
        pytest.skip(f"the bundled model is not converted at {bundled}: run scripts/setup")
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__MODEL": str(bundled)})
    assert template_line(settings).startswith("chat template: ChatML")
    empty = tmp_path / "empty"
    empty.mkdir()
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__MODEL": str(empty)})
    assert template_line(settings).startswith("warning: chat template")


def test_appliance_run_does_its_work_at_loop_nice_and_puts_it_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside a training loop on 2 cores, `appliance pause` took 9-13 s, most of it waiting for a core (issue 52):
    the run's services (engine, trainer, sandboxes: processes it starts) run at `loop.nice`, below an operator's
    command. The thread's own priority comes back when the run ends."""
    from appliance import app

    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    before = os.getpriority(os.PRIO_PROCESS, 0)
    settings.loop.nice = min(19, before + 3)
    seen: dict[str, int] = {}

    @contextmanager
    def recording_services(*_: object) -> Iterator[None]:
        seen["run"] = os.getpriority(os.PRIO_PROCESS, 0)
        child = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]
        seen["child"] = int(subprocess.run(child, capture_output=True, text=True, check=True).stdout)
        raise ApplianceError("stand-in services", "the run ends here")
        yield

    monkeypatch.setattr(app, "services", recording_services)
    with pytest.raises(ApplianceError, match="stand-in"):
        app.run_appliance(settings, log=lambda _: None)
    assert seen == {"run": settings.loop.nice, "child": settings.loop.nice}
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
