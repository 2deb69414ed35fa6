"""`appliance` commands: each a few lines over a library function.

User mistakes (an `ApplianceError`) print the message and a hint to stderr and exit 1; `--json` gives
machine-readable output. Heavy modules are imported inside the commands so `--help` stays instant.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from appliance import __version__
from appliance.config import Settings, describe_fields, load_settings
from appliance.errors import ApplianceError


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApplianceError as e:
            click.secho(f"error: {e.message}", fg="red", err=True)
            if e.hint:
                click.echo(f"  hint: {e.hint}", err=True)
            sys.exit(1)

    return wrapper


def settings_of(ctx: click.Context) -> Settings:
    """Settings are loaded lazily so `--help` works even with a broken config file."""
    obj = ctx.find_root().obj
    if "settings" not in obj:
        obj["settings"] = load_settings(obj.get("config"))
    return obj["settings"]


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


@main.command()
def version() -> None:
    """Print the appliance version."""
    click.echo(__version__)


@main.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print the effective settings as JSON.")
@click.pass_context
@friendly_errors
def config_cmd(ctx: click.Context, as_json: bool) -> None:
    """Print every setting: key, effective value, help text."""
    settings = settings_of(ctx)
    if as_json:
        click.echo(settings.model_dump_json(indent=2))
        return
    effective = settings.model_dump()
    for key, _default, help_text in describe_fields():
        value: Any = effective
        for part in key.split("."):
            value = value[part]
        click.echo(f"{key} = {value!r}\n    {help_text}")


@main.command()
@click.option("--skip-model", is_flag=True, help="Do not convert the bundled model.")
@click.option("--skip-image", is_flag=True, help="Do not build the sandbox image.")
@click.pass_context
@friendly_errors
def init(ctx: click.Context, skip_model: bool, skip_image: bool) -> None:
    """Prepare the data directory: store, Podman config, bundled model, sandbox image (idempotent)."""
    from appliance.setup import initialise

    initialise(settings_of(ctx), model=not skip_model, image=not skip_image, log=lambda m: click.echo(m, err=True))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
@friendly_errors
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check that the appliance can run here; explain each problem with a fix. Exit 0 only when ready."""
    from appliance.doctor import run_checks

    checks = run_checks(settings_of(ctx))
    ok = all(c.ok or not c.required for c in checks)

    def human(_: Any) -> None:
        for c in checks:
            mark = click.style("ok  ", fg="green") if c.ok else click.style(
                "FAIL" if c.required else "warn", fg="red" if c.required else "yellow")
            click.echo(f"{mark} {c.name}: {c.detail}")
            if not c.ok and c.hint:
                click.echo(f"       fix: {c.hint}")
        click.echo("ready" if ok else "not ready")

    emit({"ok": ok, "checks": [c.as_dict() for c in checks]}, as_json, human)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
@friendly_errors
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the latest run, its iterations, the engine state and row counts."""
    from appliance.status import read_status

    data = read_status(settings_of(ctx))

    def human(d: dict[str, Any]) -> None:
        run = d["run"]
        click.echo(f"store: {d['store']}")
        click.echo(f"run: {run['id']} ({run['status']})" if run else "run: none yet (start one with `appliance run`)")
        for it in d["iterations"]:
            click.echo(f"  iteration {it['index']}: {it['phase']} {it['status']}")
        click.echo(f"engine: {d['engine']['state']} (policy version {d['engine']['policy_version']})")
        click.echo("rows: " + ", ".join(f"{k} {v}" for k, v in d["counts"].items()))

    emit(data, as_json, human)


@main.group()
def sandbox() -> None:
    """Podman sandboxes: run a command in one, clean up leftovers."""


@sandbox.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("--json", "as_json", is_flag=True, help="Print exit_code, stdout, stderr, duration_s as JSON.")
@click.option("--workspace", type=click.Path(path_type=Path), default=None,
              help="Host directory mounted at /workspace (its files become owned by uid 1000); default: a fresh empty one.")
@click.option("--timeout", type=float, default=None, help="Time limit of the command in seconds (default sandbox.command_timeout_s).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
@friendly_errors
def sandbox_exec(ctx: click.Context, as_json: bool, workspace: Path | None, timeout: float | None,
                 cmd: tuple[str, ...]) -> None:
    """Run CMD in a fresh hardened sandbox and print its output; exits with CMD's exit code.

    One argument is a bash command line (`-- 'ls | wc -l'`); several are the argv (`-- python3 -V`).
    """
    from appliance.sandbox import Sandbox

    with Sandbox.start(settings_of(ctx), workspace=workspace) as sb:
        result = sb.exec(cmd[0] if len(cmd) == 1 else list(cmd), timeout=timeout)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        click.echo(result.stdout, nl=False)
        click.echo(result.stderr, nl=False, err=True)
        if result.timed_out:
            click.secho(f"killed after the time limit ({result.duration_s:.1f} s)", fg="red", err=True)
    sys.exit(result.exit_code)


@sandbox.command("sweep")
@click.pass_context
@friendly_errors
def sandbox_sweep(ctx: click.Context) -> None:
    """Remove every appliance sandbox container (leftovers of a killed run)."""
    from appliance.sandbox import sweep

    click.echo(f"removed {sweep(settings_of(ctx))} sandbox(es)")


@main.command()
@click.option("--run", "run_id", default=None, help="Run to watch (default: the newest, followed as new runs start).")
@click.option("--refresh", "refresh_s", type=click.FloatRange(0.1, 60), default=0.5, show_default=True,
              help="Seconds between reads of the store.")
@click.pass_context
@friendly_errors
def tui(ctx: click.Context, run_id: str | None, refresh_s: float) -> None:
    """Watch and steer the appliance in the terminal (reads the store; keys 1-5 switch screens, q quits)."""
    from appliance.tui import run_tui

    run_tui(settings_of(ctx), run_id=run_id, refresh_s=refresh_s)


def _control_command(command: str, name: str, help_text: str) -> None:
    @main.command(name, help=help_text)
    @click.option("--run", "run_id", default=None, help="Run to control (default: the newest).")
    @click.option("--timeout", "timeout_s", type=click.FloatRange(0.1), default=15.0, show_default=True,
                  help="Seconds to wait for the loop to answer.")
    @click.option("--no-wait", is_flag=True, help="Queue the request and return without waiting for the loop.")
    @click.option("--json", "as_json", is_flag=True, help="Print the answered request as JSON.")
    @click.pass_context
    @friendly_errors
    def cmd(ctx: click.Context, run_id: str | None, timeout_s: float, no_wait: bool, as_json: bool) -> None:
        from dataclasses import asdict

        from appliance.control import request
        from appliance.store import Store

        answered = request(Store(settings_of(ctx).db_path), command, run_id=run_id, timeout_s=timeout_s,
                           wait=not no_wait)
        emit(asdict(answered), as_json,
             lambda d: click.echo(f"{d['command']} run {d['run_id']}: {d['status']}"
                                  + (f" ({d['result']})" if d["result"] else "")))


_control_command("pause", "pause", "Pause the running loop at its next safe point.")
_control_command("resume", "resume", "Resume a paused loop.")
_control_command("step", "step", "Run one phase of a paused loop, then pause again.")
_control_command("stop_after_iteration", "stop", "Stop the loop when the current iteration ends.")


@main.command()
@click.option("--port", type=int, default=None, help="Proxy port (default: proxy.port from the settings).")
@click.pass_context
@friendly_errors
def serve(ctx: click.Context, port: int | None) -> None:
    """Run the engine and the proxy in the foreground; print base URLs of a fresh debug rollout."""
    import signal
    import threading

    from appliance.proxy import ProxyServer, create_app
    from appliance.proxy.debug import open_debug_route
    from appliance.serving import Engine
    from appliance.store import Store

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # `kill` stops the engine as cleanly as Ctrl-C does
    settings = settings_of(ctx)
    store = Store(settings.db_path)
    engine = Engine(settings, store)
    click.echo(f"starting the engine on {engine.base_url} (model {engine.model_path}) ...", err=True)
    engine.start()
    server = ProxyServer(create_app(store, engine, settings), settings, port=port)
    try:
        server.start()
        route = open_debug_route(store, server.url, engine.policy_version)
        click.echo(f"rollout:            {route.rollout_id}  (policy version {engine.policy_version})")
        click.echo(f"OpenAI base URL:    {route.openai_base_url}")
        click.echo(f"Anthropic base URL: {route.anthropic_base_url}")
        click.echo(f"recorded calls:     appliance calls {route.rollout_id} --json")
        click.echo("Ctrl-C stops engine and proxy.", err=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        engine.stop()


@main.command()
@click.argument("rollout_id")
@click.option("--json", "as_json", is_flag=True, help="Print every call with its token ids and logprobs as JSON.")
@click.pass_context
@friendly_errors
def calls(ctx: click.Context, rollout_id: str, as_json: bool) -> None:
    """Show the model calls the proxy recorded for ROLLOUT_ID."""
    from appliance.proxy.debug import call_summaries
    from appliance.store import Store

    rows = call_summaries(Store(settings_of(ctx).db_path), rollout_id)

    def human(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            click.echo(f"#{r['seq']} {r['status']:5} v{r['policy_version']} prompt {r['prompt_len']} tok, "
                       f"completion {r['completion_len']} tok, {r['latency_s'] * 1000:.0f} ms"
                       + (f"  {r['error']}" if r["error"] else ""))
        if not rows:
            click.echo("no calls recorded yet")

    emit(rows, as_json, human)


if __name__ == "__main__":
    main()
