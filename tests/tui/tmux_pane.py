"""Helpers of the tmux tests: a private tmux server and waiting for what a pane shows."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def tmux_server(socket: Path) -> Iterator[Callable[..., str]]:
    """A private server whose socket lives in the test's tmp dir; killed (with its panes) on the way out."""

    def run(*args: str) -> str:
        return subprocess.run(["tmux", "-S", str(socket), *args], capture_output=True, text=True, check=True).stdout

    try:
        yield run
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True)


def wait_for(what: Callable[[], str], pattern: str, *, timeout_s: float = 60.0,
             check: Callable[[], None] = lambda: None) -> str:
    """Poll until the text matches; `check` raises when waiting longer is pointless (a process died).
    The deadline only bounds a hang, nothing is timed."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = what()
        if re.search(pattern, text):
            return text
        check()
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {pattern!r}; the pane shows:\n{text}")
        time.sleep(0.2)
