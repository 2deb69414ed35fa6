"""Fixtures of the fault suite (its loop: faulty_loop.py)."""

from __future__ import annotations

import pytest

from appliance.config import Settings


@pytest.fixture
def fault_settings(settings: Settings) -> Settings:
    settings.loop.iterations = 1
    settings.loop.families = ["files"]
    return settings
