"""The appliance process's start-up: what it refuses before starting anything, and what it says."""

from __future__ import annotations

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
