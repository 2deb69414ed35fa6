"""Shared fixtures: a settings tree over a temporary APPLIANCE_HOME and a fresh store.

Expensive shared resources (the Podman storage root, the CPU vLLM engine with the tiny model) are
session-scoped so the whole suite pays for them once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.store import Store

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def settings(home: Path) -> Settings:
    return load_settings(environ={"APPLIANCE_HOME": str(home)})


@pytest.fixture
def store(settings: Settings) -> Store:
    s = Store(settings.db_path)
    yield s
    s.close()
