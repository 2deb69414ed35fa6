"""The model door, host side: a unix socket per sandbox that relays bytes to the proxy's loopback port.

A sandbox has no network. Its socket directory (under settings.sockets_dir) is bind-mounted read-only at
/door; the relay inside the image (image/door-relay.py) listens on 127.0.0.1:DOOR_PORT and forwards to
the socket, this side forwards to the proxy. The door relays bytes only: the route (`/r/<token>/...`)
travels in the URL and the proxy checks the token, so a sandbox reaches only a route whose secret it
was given. All doors share one asyncio loop on a daemon thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from appliance.errors import SandboxError

DOOR_PORT = 4000  # inside every sandbox: http://127.0.0.1:4000 is the model proxy
# Open connections per sandbox; past it new ones are closed at once, so a sandbox cannot exhaust the
# appliance's file descriptors (the proxy itself caps calls in flight per rollout far lower).
MAX_CONNECTIONS = 64

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _door_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="model-door", daemon=True).start()
        return _loop


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


class DoorListener:
    """One sandbox's socket. `ready` is set at the first connection: the in-sandbox relay says hello
    (connects and closes without a byte) once it listens."""

    def __init__(self, door: ModelDoor, path: Path) -> None:
        if len(str(path)) > 100:  # sun_path holds 108 bytes
            raise SandboxError(f"socket path {path} is too long for a unix socket ({len(str(path))} > 100 chars)",
                               "set APPLIANCE_HOME to a shorter path")
        self.door, self.path = door, path
        self.ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = _door_loop()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_unix_server(self._handle, path=str(path)), self._loop).result(10)
        os.chmod(path, 0o666)  # the agent (uid 1000) must be able to connect

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.ready.set()
        if len(self._writers) >= 2 * MAX_CONNECTIONS:  # two writers per relayed connection
            writer.close()
            return
        self._writers.add(writer)
        up_writer = None
        try:
            first = await reader.read(1 << 16)
            if not first:
                return
            up_reader, up_writer = await asyncio.open_connection(self.door.target_host, self.door.target_port)
            self._writers.add(up_writer)
            up_writer.write(first)
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
                    self._writers.discard(w)

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            await self._server.wait_closed()

        if not self._loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
            except (TimeoutError, RuntimeError):
                pass
        self.path.unlink(missing_ok=True)


class ModelDoor:
    """Where a sandbox's door leads: the proxy on loopback. One door can serve many sandboxes."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host, self.target_port = target_host, target_port

    def listen(self, socket_path: Path) -> DoorListener:
        return DoorListener(self, socket_path)
