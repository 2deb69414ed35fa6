"""A sandbox with a model door (every third-party harness's) is scrubbed before its copy-out, like the others:
what the agent left running cannot act on the copy. Its door relay is spared (catatonit, its PID 1, would end
the container with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.sandbox import ModelDoor, Sandbox

pytestmark = pytest.mark.slow  # real Podman

# Left behind by the agent's last command, in a session of its own: it waits for the copy-out's `tar` (the
# agent's uid runs it) and kills it, so the copy fails as if the machine had.
WATCHER = """import os, signal, sys, time
for i in range(3000):
    open(f'/workspace/f{i}', 'w').close()  # a tree that takes tar a while
if os.fork() == 0:
    os.setsid()
    null = os.open('/dev/null', os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        for pid in os.listdir('/proc'):
            try:
                if pid.isdigit() and open(f'/proc/{pid}/comm').read().strip() == 'tar':
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
print('left')
"""


def test_what_the_agent_left_running_in_a_door_sandbox_cannot_touch_the_copy_out(
        sandbox_settings: Settings, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    with Sandbox.start(sandbox_settings, workspace=ws, door=ModelDoor("127.0.0.1", 9)) as sb:
        r = sb.exec(["python3", "-c", WATCHER], timeout=60)
        assert r.stdout.strip() == "left", (r.exit_code, r.stdout, r.stderr)
    assert (ws / "a.txt").read_text() == "a\n"
    assert len(list(ws.glob("f*"))) == 3000
