"""The proxy app (both dialects' routes) and serving it with uvicorn in a background thread, on loopback."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from appliance.config import Settings
from appliance.errors import ApplianceError
from appliance.proxy.anthropic import AnthropicDialect
from appliance.proxy.app import Proxy, ServingEngine
from appliance.store import Store


def create_app(store: Store, engine: ServingEngine, settings: Settings) -> Starlette:
    proxy = Proxy(store, engine, settings)
    anthropic = AnthropicDialect(proxy)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.aclose()

    app = Starlette(lifespan=lifespan, routes=[
        Route("/r/{token}/v1/chat/completions", proxy.chat, methods=["POST"]),
        Route("/r/{token}/v1/completions", proxy.completions, methods=["POST"]),
        Route("/r/{token}/v1/models", proxy.models, methods=["GET"]),
        Route("/r/{token}/v1/messages", anthropic.messages, methods=["POST"]),
    ])
    app.state.proxy = proxy
    return app


class ProxyServer:
    """`start()` returns once the port accepts connections; `port=0` in settings picks a free port."""

    def __init__(self, app: Starlette, settings: Settings, port: int | None = None) -> None:
        self.app = app
        self.host = settings.proxy.host
        self.port = settings.proxy.port if port is None else port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> ProxyServer:
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning",
                                access_log=False, lifespan="on", timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ApplianceError(f"the proxy could not listen on {self.host}:{self.port}",
                                     "another process holds the port; set proxy.port to a free one")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
