"""The real proxy app served by uvicorn on a free port, in front of the session's engine."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from appliance.proxy import ProxyServer, create_app, register_route
from appliance.schemas import Rollout, RolloutStatus
from appliance.store import Store


@dataclass
class Route:
    rollout_id: str
    token: str
    base: str  # the Anthropic base URL; OpenAI SDKs take base + "/v1"
    store: Store

    @property
    def openai_base(self) -> str:
        return self.base + "/v1"


@pytest.fixture(scope="module")
def proxy(engine):
    server = ProxyServer(create_app(engine.store, engine, engine.settings), engine.settings, port=0).start()
    yield server
    server.stop()


def new_route(store: Store, url: str) -> Route:
    rid = f"test-{uuid.uuid4().hex[:8]}"
    store.add_rollout(Rollout(rid, None, None, None, None, "test", 0, RolloutStatus.RUNNING, purpose="debug"))
    token = register_route(store, rid)
    return Route(rid, token, f"{url}/r/{token}", store)


@pytest.fixture
def make_route():
    """`make_route(store, proxy_url)`: a fresh running debug rollout with its own token."""
    return new_route


@pytest.fixture
def route(proxy, engine) -> Route:
    return new_route(engine.store, proxy.url)
