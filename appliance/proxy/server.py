"""The proxy app (both dialects' routes) and serving it with uvicorn in a background thread, on loopback.

Request heads are capped at the door (`CappedHttp`): uvicorn's httptools protocol keeps every header
whatever its size or number until the head ends (six headers of 100 MiB from a sandbox took the appliance
from 181 to 961 MiB), before any route, and so before the body's own cap, can refuse it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from appliance.config import Settings
from appliance.errors import ApplianceError
from appliance.proxy.anthropic import AnthropicDialect
from appliance.proxy.app import Proxy, ServingEngine
from appliance.proxy.responses import ResponsesDialect
from appliance.store import Store

# A harness's SDK sends well under 2 KiB of headers in about a dozen; what is past these is an attack.
HEAD_MAX_BYTES = 64 * 1024  # the request line and every header, as received
HEADERS_MAX = 100


class CappedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the request head capped in bytes and in headers: past either, a
    431 naming the limit, and the connection is closed with the rest of the head unread."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._in_head, self._head_bytes, self._header_count = True, 0, 0
        self._too_many = False

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            room = HEAD_MAX_BYTES - self._head_bytes
            if len(data) > room:  # the head may end inside this chunk: give the parser only what fits
                self._head_bytes = HEAD_MAX_BYTES
                super().data_received(data[:room])
                # (a head that ended there, and a body after it, reset the count: a new head may have begun)
                if self._in_head and self._head_bytes == HEAD_MAX_BYTES and not self.transport.is_closing():
                    return self._refuse(f"the request's headers are over {HEAD_MAX_BYTES} bytes")
                data = data[room:]
            else:
                self._head_bytes += len(data)
        if data and not self.transport.is_closing():
            super().data_received(data)

    def on_message_begin(self) -> None:
        self._in_head, self._header_count = True, 0
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > HEADERS_MAX:
            self._too_many = True
            raise ValueError("too many headers")  # stops the parser: uvicorn then answers 400, unless...
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        if self._too_many:  # ...the parser stopped because we stopped it
            return self._refuse(f"the request has more than {HEADERS_MAX} headers")
        super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes = True, 0  # (a pipelined request's head starts now)
        super().on_message_complete()

    def _refuse(self, why: str) -> None:
        msg = (f"{why}: the model door takes at most {HEADERS_MAX} headers of {HEAD_MAX_BYTES} bytes in all "
               "(send fewer or shorter headers)").encode()
        self.transport.write(STATUS_LINE[431] + b"content-type: text/plain; charset=utf-8\r\n"
                             + b"content-length: " + str(len(msg)).encode() + b"\r\nconnection: close\r\n\r\n"
                             + msg)
        self.transport.close()


def create_app(store: Store, engine: ServingEngine, settings: Settings) -> Starlette:
    proxy = Proxy(store, engine, settings)
    anthropic = AnthropicDialect(proxy)
    responses = ResponsesDialect(proxy)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.aclose()

    app = Starlette(lifespan=lifespan, routes=[
        Route("/r/{token}/v1/chat/completions", proxy.chat, methods=["POST"]),
        Route("/r/{token}/v1/completions", proxy.completions, methods=["POST"]),
        Route("/r/{token}/v1/models", proxy.models, methods=["GET"]),
        Route("/r/{token}/v1/messages", anthropic.messages, methods=["POST"]),
        Route("/r/{token}/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
        Route("/r/{token}/v1/responses", responses.responses, methods=["POST"]),
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
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", http=CappedHttp,
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
