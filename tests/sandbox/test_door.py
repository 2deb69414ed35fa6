"""The model door: inside http://127.0.0.1:DOOR_PORT reaches the proxy, nothing else is reachable."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from appliance.config import Settings
from appliance.sandbox import DOOR_PORT, ModelDoor, Sandbox

pytestmark = pytest.mark.slow
TOKEN_A, TOKEN_B = "tok-a-9f3c1e", "tok-b-77d2aa"


class RouteChecker(BaseHTTPRequestHandler):
    """Stands in for the proxy: only /r/<known token>/... answers."""

    def do_GET(self) -> None:  # noqa: N802
        parts = self.path.split("/")
        ok = len(parts) > 2 and parts[1] == "r" and parts[2] in (TOKEN_A, TOKEN_B)
        body = json.dumps({"route": parts[2], "path": self.path} if ok else {"error": "unknown route"}).encode()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def proxy() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RouteChecker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def curl(sb: Sandbox, path: str) -> str:
    r = sb.exec(f"curl -s -w ' %{{http_code}}' http://127.0.0.1:{DOOR_PORT}{path}")
    return r.stdout


def test_door_reaches_the_proxy_and_egress_stays_closed(sandbox_settings: Settings, proxy: ThreadingHTTPServer) -> None:
    door = ModelDoor("127.0.0.1", proxy.server_address[1])
    with Sandbox.start(sandbox_settings, door=door) as sb:
        out = curl(sb, f"/r/{TOKEN_A}/v1/models")
        assert out.endswith(" 200") and f'"route": "{TOKEN_A}"' in out
        big = sb.exec("python3 -c \"import urllib.request as u; "
                      f"print(len(u.urlopen('http://127.0.0.1:{DOOR_PORT}/r/{TOKEN_A}/' + 'x' * 5000).read()))\"")
        assert big.exit_code == 0 and int(big.stdout) > 5000
        r = sb.exec("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=5)'")
        assert "Network is unreachable" in r.stderr
        assert sb.exec("ls /door").stdout == "door.sock\n"
        assert sb.exec("rm /door/door.sock").exit_code != 0  # read-only mount
    assert not (sandbox_settings.sockets_dir / sb.name).exists()


def test_a_sandbox_cannot_reach_another_sandboxs_route(sandbox_settings: Settings, proxy: ThreadingHTTPServer) -> None:
    door = ModelDoor("127.0.0.1", proxy.server_address[1])
    with Sandbox.start(sandbox_settings, door=door) as a, Sandbox.start(sandbox_settings, door=door) as b:
        assert curl(b, f"/r/{TOKEN_B}/v1/models").endswith(" 200")
        assert curl(a, "/r/guessed-token/v1/models").endswith(" 404")  # the proxy refuses unknown routes
        # B's socket is not in A's filesystem, and the host's socket directory is not mounted at all.
        r = a.exec(f"ls {sandbox_settings.sockets_dir} 2>&1; find / -name door.sock 2>/dev/null")
        assert "No such file" in r.stdout and b.name not in r.stdout
        assert r.stdout.count("door.sock") == 1


def test_a_dead_proxy_is_a_closed_connection_not_a_hang(sandbox_settings: Settings) -> None:
    with Sandbox.start(sandbox_settings, door=ModelDoor("127.0.0.1", 9)) as sb:
        r = sb.exec(f"curl -sS --max-time 10 http://127.0.0.1:{DOOR_PORT}/v1/models", timeout=20)
        assert r.exit_code in (52, 56) and not r.timed_out  # empty reply / connection reset
