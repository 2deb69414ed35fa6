"""Commands that run and steer the loop: run, tui, pause/resume/step/stop, report, train."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from appliance.cli.base import echo, emit, friendly_errors, main, open_store, settings_of


@main.command()
@click.argument("iteration", type=int, required=False)
@click.option("--run", "run_id", default=None, help="Run to report on (default: the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print the report's JSON instead of its Markdown.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="Write the report as one self-contained HTML page (charts included) to this file.")
@click.pass_context
@friendly_errors
def report(ctx: click.Context, iteration: int | None, run_id: str | None, as_json: bool,
           html_path: Path | None) -> None:
    """Print the capability report of an iteration (default: the latest), or write it as HTML."""
    from appliance.control import resolve_run
    from appliance.errors import NotFoundError
    from appliance.report_html import write_html

    with open_store(settings_of(ctx)) as store:
        run = resolve_run(store, run_id)
        found = store.report(run.id, iteration)
        if found is None:
            which = f"iteration {iteration}" if iteration is not None else "any iteration"
            raise NotFoundError(f"run {run.id} has no report for {which}",
                                "reports are written at the end of each iteration; `appliance status` shows progress")
        data, markdown = found
        if html_path is not None:
            click.echo(f"wrote {write_html(store, run.id, data, markdown, html_path)}")
            return
    echo(json.dumps(data.as_dict(), indent=2) if as_json else markdown)


@main.command()
@click.option("--iterations", type=click.IntRange(1), default=None,
              help="Training iterations of the run (default loop.iterations); a restarted run continues its count.")
@click.option("--headless", is_flag=True,
              help="No TUI: log lines and a progress line (the default without a terminal).")
@click.option("--minutes", type=click.FloatRange(min=1), default=None,
              help="End practice and training this many minutes from now (loop.deadline): the last iteration "
                   "practises less so that it still trains; its evaluation runs past the time.")
@click.pass_context
@friendly_errors
def run(ctx: click.Context, iterations: int | None, headless: bool, minutes: float | None) -> None:
    """Run the loop: synthesize, validate, practise, learn, evaluate, diagnose; resumes an unfinished run."""
    import datetime as dt

    from appliance.app import run_appliance
    from appliance.evaluate import learning_curve
    from appliance.lineage import start_label
    from appliance.schemas import RunStatus

    settings = settings_of(ctx)
    if minutes is not None:
        settings.loop.deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=minutes)
    headless = headless or not sys.stdout.isatty()
    run_id = run_appliance(settings, iterations=iterations, headless=headless,
                           log=lambda m: echo(m, err=True), progress=lambda m: echo(m, err=True))
    with open_store(settings) as store:
        status = store.get_run(run_id).status
        echo(f"run {run_id}: {status}")
        echo("held-out learning curve (iteration: pass@1 [95 % interval]):")
        for it, p in learning_curve(store, run_id):
            echo(f"  {it}: {p.describe()}" + (f"  ({start_label(store, run_id)})" if it == 0 else ""))
    if status == RunStatus.FAILED:
        # a supervisor (systemd, a container restart policy, a script) must see a failed run as a failure;
        # the cause was logged above when the run failed, and `appliance run` continues it once fixed
        echo(f"run {run_id} failed: the cause is in the log above (and on the TUI's overview); fix it and "
             "`appliance run` continues the run", err=True)
        ctx.exit(1)


@main.command()
@click.option("--run", "run_id", default=None, help="Run to watch (default: the newest, followed as new runs start).")
@click.option("--refresh", "refresh_s", type=click.FloatRange(0.1, 60), default=0.5, show_default=True,
              help="Seconds between reads of the store.")
@click.pass_context
@friendly_errors
def tui(ctx: click.Context, run_id: str | None, refresh_s: float) -> None:
    """Watch and steer the appliance in the terminal (reads the store; keys 1-6 switch screens, q quits)."""
    from appliance.tui import run_tui

    run_tui(settings_of(ctx), run_id=run_id, refresh_s=refresh_s)


def _control_options(f: Any) -> Any:
    for option in reversed([
        click.option("--run", "run_id", default=None, help="Run to control (default: the newest)."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(0.1), default=15.0, show_default=True,
                     help="Seconds to wait at most for the live loop's answer (it answers within a second or "
                          "two; with no live loop the command says so at once)."),
        click.option("--no-wait", is_flag=True, help="Queue the request for the live loop and return at once."),
        click.option("--json", "as_json", is_flag=True, help="Print the answered request as JSON."),
    ]):
        f = option(f)
    return f


def _send(ctx: click.Context, command: str, run_id: str | None, timeout_s: float, no_wait: bool,
          as_json: bool) -> None:
    from dataclasses import asdict

    from appliance.control import request

    with open_store(settings_of(ctx)) as store:
        answered = request(store, command, run_id=run_id, timeout_s=timeout_s, wait=not no_wait)
    emit(asdict(answered), as_json,
         lambda d: echo(f"{d['command']} run {d['run_id']}: {d['status']}"
                        + (f" ({d['result']})" if d["result"] else "")))


def _control_command(command: str, name: str, help_text: str) -> None:
    @main.command(name, help=help_text)
    @_control_options
    @click.pass_context
    @friendly_errors
    def cmd(ctx: click.Context, run_id: str | None, timeout_s: float, no_wait: bool, as_json: bool) -> None:
        _send(ctx, command, run_id, timeout_s, no_wait, as_json)


_control_command("pause", "pause", "Pause the running loop: no new rollout starts (those in flight finish), no "
                 "new training step starts (the one in flight finishes; the trainer keeps its memory, the GPU "
                 "included, while paused: `stop --now` frees it); other phases run to their end first.")
_control_command("resume", "resume", "Resume a paused loop where it was.")
_control_command("step", "step", "Run one phase of a paused loop, then pause again.")


@main.command("stop")
@click.option("--now", is_flag=True,
              help="Stop at the next safe point instead (no new rollout starts, those in flight finish; a "
                   "training phase saves what it trained after the step in flight): `appliance run` ends as on "
                   "SIGTERM, and continues the run (and the training phase) when run again.")
@_control_options
@click.pass_context
@friendly_errors
def stop(ctx: click.Context, now: bool, run_id: str | None, timeout_s: float, no_wait: bool, as_json: bool) -> None:
    """Stop the loop when the current iteration ends (--now: at the next safe point)."""
    _send(ctx, "stop_now" if now else "stop_after_iteration", run_id, timeout_s, no_wait, as_json)


@main.command()
@click.option("--steps", type=click.IntRange(1), default=1, show_default=True,
              help="GRPO optimizer steps; the kept groups are dealt over them.")
@click.option("--run", "run_id", default=None, help="Run whose practice rollouts to train on (default: the newest).")
@click.option("--json", "as_json", is_flag=True,
              help="Print per-step metrics, phase timings and the checkpoint as JSON.")
@click.pass_context
@friendly_errors
def train(ctx: click.Context, steps: int, run_id: str | None, as_json: bool) -> None:
    """Train on the serving policy's practised rollouts (training.method), then sync and check the engine.

    Starts the engine (it must not be running in another process), pauses it, trains, loads the new
    weights, passes the canary, stops it. The loop does the same inside a run without the restart.
    """
    from appliance.errors import ApplianceError
    from appliance.plan import fit_to_gpus
    from appliance.serving import Engine
    from appliance.training.data import train_on_practice

    settings, _ = fit_to_gpus(settings_of(ctx))  # on a GPU server, as a run would serve and train
    with open_store(settings) as store:
        run = store.get_run(run_id) if run_id else store.latest_run()
        if run is None:
            raise ApplianceError("this store has no run to train on", "start a run first (`appliance run`)")
        engine = Engine(settings, store)
        engine.start()
        try:
            result = train_on_practice(store, settings, engine, run_id=run.id, steps=steps)
        finally:
            engine.stop()
    data = {"run": run.id, "policy_version": result.policy_version,
            "checkpoint": result.checkpoint.path if result.checkpoint else None,
            "steps": result.steps, "timings": result.timings}

    def human(d: dict[str, Any]) -> None:
        for i, m in enumerate(d["steps"], 1):
            keys = ("loss", "reward_mean", "valid_groups", "dropped_groups", "infra_error_rate",
                    "logprob_gap_mean", "is_ratio_mean", "tokens_per_s", "step_time_s", "sft_loss",
                    "groups_with_signal", "clip_ratio", "entropy", "truncated_tokens", "skipped_steps")
            echo(f"step {i}: " + "  ".join(f"{k}={m[k]:.4g}" for k in keys if k in m))
        echo("phase: " + "  ".join(f"{k}={v:.2f}" for k, v in d["timings"].items()))
        echo(f"policy version {d['policy_version']}" + (f" <- {d['checkpoint']}" if d["checkpoint"] else ""))

    emit(data, as_json, human)
