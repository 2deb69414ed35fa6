"""What every command shares: the root group `main`, settings, the store, errors and output.

User mistakes (an `ApplianceError`) print the message and a hint to stderr and exit 1; `--json` gives
machine-readable output (`emit`). A command opens the store with `open_store` so that it is closed again.

Text from the store or from a task (an agent's observations and file names, a task author's setup
output, reasons, errors) is the agent's or the author's, not ours: `echo` prints it through `inert`, so
an escape sequence in it (a clipboard write, a title, a hyperlink, a screen clear) shows as text instead
of reaching the operator's terminal. Styled output styles inert text (`click.style(inert(x), ...)`).
JSON output needs nothing: `json.dumps` escapes every control character.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from appliance.config import Settings, load_settings
from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.store import Store


# C0 controls but newline and tab, DEL, C1 controls (CSI is U+009B) and the bidirectional overrides that
# make text read differently from what it is: each shown as its escape (`\x1b`, `\u202e`)
_CONTROLS = [c for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"]
_INERT = ({c: f"\\x{c:02x}" for c in _CONTROLS}
          | {c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


@contextmanager
def sigterm_stops_cleanly() -> Iterator[None]:
    """SIGTERM (`kill`, a supervisor, a closed SSH session's shell) raises KeyboardInterrupt in the block, so
    its `finally`s run as on Ctrl-C: the engine (its own process group, which no signal of ours reaches
    otherwise) is stopped and the sandboxes swept, instead of left running after the command died."""
    import signal

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def inert(text: object) -> str:
    """`text` as it may reach a terminal: control characters made visible, newline and tab kept."""
    return str(text).translate(_INERT)


def echo(text: object = "", *, err: bool = False, nl: bool = True) -> None:
    """click.echo for text that is not ours (see the module docstring)."""
    click.echo(inert(text), err=err, nl=nl)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApplianceError as e:
            click.secho(f"error: {inert(e.message)}", fg="red", err=True)
            if e.hint:
                echo(f"  hint: {e.hint}", err=True)
            sys.exit(1)

    return wrapper


def settings_of(ctx: click.Context) -> Settings:
    """Settings are loaded lazily so `--help` works even with a broken config file."""
    obj = ctx.find_root().obj
    if "settings" not in obj:
        obj["settings"] = load_settings(obj.get("config"))
    return obj["settings"]


@contextmanager
def open_store(settings: Settings) -> Iterator[Store]:
    """The store of these settings, closed when the command is done with it."""
    from appliance.store import Store

    store = Store(settings.db_path)
    try:
        yield store
    finally:
        store.close()


def emit(data: Any, as_json: bool, human: Callable[[Any], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human(data)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="appliance.toml to read (default: $APPLIANCE_CONFIG or $APPLIANCE_HOME/appliance.toml).")
@click.pass_context
def main(ctx: click.Context, config: Path | None) -> None:
    """appliance: make a tool-using LLM agent better at its harness work, offline, on one machine."""
    ctx.obj = {"config": config}
