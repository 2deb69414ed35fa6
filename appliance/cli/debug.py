"""Commands that exercise one piece at a time: a single rollout and its trajectory, a sandbox, the engine
and proxy in the foreground, the calls the proxy recorded."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from appliance.cli.base import echo, emit, friendly_errors, inert, main, open_store, settings_of, sigterm_stops_cleanly
from appliance.config import Settings


@main.group(invoke_without_command=True)
@click.option("--task", "task_path", type=click.Path(exists=True, path_type=Path), default=None,
              help="Task directory or TOML file to run once.")
@click.option("--harness", default="builtin", show_default=True, help="builtin, or a name under [harnesses].")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@friendly_errors
def rollout(ctx: click.Context, task_path: Path | None, harness: str, as_json: bool) -> None:
    """Run one rollout of a task (engine, proxy, sandbox, verifier) and report its tokens; or `show ID`."""
    if ctx.invoked_subcommand is not None:
        return
    if task_path is None:
        raise click.UsageError("give --task PATH to run a rollout, or `appliance rollout show ID`")
    from appliance.app import services
    from appliance.practice import new_rollout, run_rollout
    from appliance.tasks import load_task

    settings = settings_of(ctx)
    spec = load_task(task_path)
    if harness != "builtin":
        from appliance.harness.external import fit_context

        # an unknown name, or a harness whose first prompt the model cannot serve, fails before the engine starts
        settings = fit_context(settings, harness, log=lambda m: echo(m, err=True))
    with open_store(settings) as store:
        with sigterm_stops_cleanly(), services(settings, store, log=lambda m: echo(m, err=True)) as svc:
            r = new_rollout(store, harness=harness, policy_version=svc.engine.policy_version, purpose="debug")
            result = run_rollout(svc.practice, spec, r)
        calls = store.model_calls(r.id)
    traj = result.trajectory
    data = {
        "rollout_id": r.id, "outcome": result.rollout.outcome, "reward": result.rollout.reward,
        "error": result.rollout.error, "turns": result.rollout.turns, "calls": len(calls),
        "samples": traj.samples if traj else 0, "sampled_tokens": traj.sampled_tokens if traj else 0,
        "retokenized_tokens": traj.retokenized_tokens if traj else 0,
        "divergences": traj.to_dict()["divergences"] if traj else [],
        "tampered": result.tampered,
    }

    def human(d: dict[str, Any]) -> None:
        echo(f"rollout {d['rollout_id']}: {d['outcome']} (reward {d['reward']}) after {d['turns']} turns")
        if d["error"]:
            echo(f"  reason: {d['error']}")
        echo(f"  calls {d['calls']}, samples {d['samples']}, sampled tokens {d['sampled_tokens']}, "
             f"re-tokenized tokens {d['retokenized_tokens']}, divergences {len(d['divergences'])}")
        echo(f"  `appliance rollout show {d['rollout_id']}` prints the trajectory")

    emit(data, as_json, human)


@rollout.command("show")
@click.argument("rollout_id")
@click.option("--json", "as_json", is_flag=True, help="Print the trajectory as JSON.")
@click.pass_context
@friendly_errors
def rollout_show(ctx: click.Context, rollout_id: str, as_json: bool) -> None:
    """Print a rollout's trajectory: sampled (model) tokens in green, prompt/tool tokens dim."""
    from appliance.rollout_view import rollout_view

    settings = settings_of(ctx)
    decode = _decoder(settings)
    with open_store(settings) as store:
        view = rollout_view(store, rollout_id, decode)

    def human(v: dict[str, Any]) -> None:
        r = v["rollout"]
        echo(f"rollout {r['id']} task {r['task']} harness {r['harness']}: {r['outcome']} reward {r['reward']}")
        for c in v["calls"]:
            echo(f"  call {c['seq']}: {c['status']} prompt {c['prompt_tokens']} + completion "
                 f"{c['completion_tokens']} tokens, {c['latency_s']} s")
        for s in v["samples"]:
            click.echo(click.style(f"--- sample (branch {s['branch']}): {s['tokens']} tokens, {s['sampled']} sampled",
                                   bold=True))
            for seg in s["segments"]:
                text = inert(seg["text"])
                click.echo(click.style(text, fg="green") if seg["sampled"] else click.style(text, dim=True),
                           nl=False)
            echo()

    emit(view, as_json, human)


def _decoder(settings: Settings) -> Callable[[list[int]], str]:
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(settings.model_path))
        return lambda ids: str(tok.decode(ids))
    except Exception:  # no model folder: show the ids themselves
        return lambda ids: " ".join(map(str, ids))


@main.group()
def sandbox() -> None:
    """Podman sandboxes: run a command in one, clean up leftovers."""


@sandbox.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("--json", "as_json", is_flag=True, help="Print exit_code, stdout, stderr, duration_s as JSON.")
@click.option("--workspace", type=click.Path(path_type=Path), default=None,
              help="Host directory copied to /workspace and back when CMD ends; default: a fresh empty one.")
@click.option("--timeout", type=float, default=None,
              help="Time limit of the command in seconds (default sandbox.exec_timeout_s).")
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
        echo(json.dumps(result.as_dict(), indent=2))
    else:
        echo(result.stdout, nl=False)
        echo(result.stderr, nl=False, err=True)
        if result.timed_out:
            click.secho(f"killed after the time limit ({result.duration_s:.1f} s)", fg="red", err=True)
    sys.exit(result.exit_code)


@sandbox.command("sweep")
@click.pass_context
@friendly_errors
def sandbox_sweep(ctx: click.Context) -> None:
    """Remove every appliance sandbox container (leftovers of a killed run)."""
    from appliance.sandbox import sweep

    echo(f"removed {sweep(settings_of(ctx))} sandbox(es)")


@main.command()
@click.option("--port", type=int, default=None, help="Proxy port (default: proxy.port from the settings).")
@click.pass_context
@friendly_errors
def serve(ctx: click.Context, port: int | None) -> None:
    """Run the engine and the proxy in the foreground; print base URLs of a fresh debug rollout."""
    import threading

    from appliance.app import engine_and_proxy
    from appliance.proxy.debug import open_debug_route

    settings = settings_of(ctx)
    with open_store(settings) as store, sigterm_stops_cleanly():
        try:
            with engine_and_proxy(settings, store, log=lambda m: echo(m, err=True), port=port) as running:
                engine, server = running
                route = open_debug_route(store, server.url, engine.policy_version)
                echo(f"rollout:            {route.rollout_id}  (policy version {engine.policy_version})")
                echo(f"OpenAI base URL:    {route.openai_base_url}")
                echo(f"Anthropic base URL: {route.anthropic_base_url}")
                echo(f"recorded calls:     appliance calls {route.rollout_id} --json")
                echo("Ctrl-C stops engine and proxy.", err=True)
                threading.Event().wait()
        except KeyboardInterrupt:
            pass


@main.command()
@click.argument("rollout_id")
@click.option("--json", "as_json", is_flag=True, help="Print every call with its token ids and logprobs as JSON.")
@click.pass_context
@friendly_errors
def calls(ctx: click.Context, rollout_id: str, as_json: bool) -> None:
    """Show the model calls the proxy recorded for ROLLOUT_ID."""
    from appliance.proxy.debug import call_summaries

    with open_store(settings_of(ctx)) as store:
        rows = call_summaries(store, rollout_id)

    def human(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            echo(f"#{r['seq']} {r['status']:5} v{r['policy_version']} prompt {r['prompt_len']} tok, "
                 f"completion {r['completion_len']} tok, {r['latency_s'] * 1000:.0f} ms"
                 + (f"  {r['error']}" if r["error"] else ""))
        if not rows:
            echo("no calls recorded yet")

    emit(rows, as_json, human)
