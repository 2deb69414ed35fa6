"""Shared fixtures: a settings tree over a temporary APPLIANCE_HOME and a fresh store.

Expensive shared resources (the Podman storage root, the CPU vLLM engine with the tiny model) are
session-scoped so the whole suite pays for them once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from appliance.store import Store
from small_run import free_port  # tests/small_run.py

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos", action="store_true",
                     help="also run the tests marked chaos: the long fault sweeps `scripts/chaos CASE` runs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The chaos sweeps (a real run stopped and restarted at every phase) cost more engine starts than CI's
    90 minutes leave room for; each is a `scripts/chaos CASE` run with a verdict line instead."""
    if config.getoption("--chaos"):
        return
    skip = pytest.mark.skip(reason="a chaos sweep: run it with `scripts/chaos CASE` (or pytest --chaos)")
    for item in items:
        if "chaos" in item.keywords:
            item.add_marker(skip)


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


# --- sandbox: an isolated Podman storage root per test session ------------------------------------

@pytest.fixture(scope="session")
def sandbox_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings whose Podman config, storage root and locks live in a tmp dir for this session.

    The sandbox image is shared read-only from the main store (built by `appliance init` / scripts/setup)
    through additionalimagestores, which costs nothing; only when the main store lacks it is it built
    into the session root (a few minutes: mmdebstrap + podman build).
    """
    from appliance.sandbox import build_image, image_exists
    from appliance.sandbox.podman import remove_storage_root

    base = tmp_path_factory.mktemp("sbx")
    main = load_settings()
    env = {
        "APPLIANCE_HOME": str(base / "home"),
        "APPLIANCE_PODMAN__GRAPHROOT": str(base / "storage"),
        "APPLIANCE_SANDBOX__MEMORY": "256m",
        "APPLIANCE_SANDBOX__LIFETIME_S": "600",  # the dead-man switch for anything a failed test leaves
        "APPLIANCE_SANDBOX__EXEC_TIMEOUT_S": "30",
    }
    if image_exists(main):
        env["APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES"] = f'["{main.podman_graphroot}"]'
    s = load_settings(environ=env)
    build_image(s)
    yield s
    remove_storage_root(s)


# --- serving: one CPU vLLM engine serving a tiny random llama per test session ----------------------

@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded random llama (hidden 64, 2 layers) with the bundled model's tokenizer and chat template."""
    from tiny_model import make_tiny_model  # tests/tiny_model.py

    bundled = load_settings().model_path
    if not (bundled / "tokenizer.json").exists():
        pytest.skip(f"the bundled model is not converted at {bundled}: run scripts/setup")
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", bundled)


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path):
    """The session's one engine (~35 s to start on the CPU); tests that change its weights leave it SERVING."""
    from appliance.serving import Engine

    home = tmp_path_factory.mktemp("engine") / "home"
    s = load_settings(environ={"APPLIANCE_HOME": str(home), "APPLIANCE_ENGINE__MODEL": str(tiny_model),
                               "APPLIANCE_ENGINE__PORT": str(free_port()), "APPLIANCE_ENGINE__MAX_MODEL_LEN": "2048",
                               # a shared 2-core machine with other engines starting can take minutes
                               "APPLIANCE_ENGINE__STARTUP_TIMEOUT_S": "900"})
    st = Store(s.db_path)
    eng = Engine(s, st)
    eng.start()
    yield eng
    eng.stop()
    st.close()
