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
@click.option("--skip-image", is_flag=True, help="Do not build the sandbox image (nor the harness images).")
@click.option("--skip-harnesses", is_flag=True, help="Do not build the third-party harness images.")
@click.pass_context
@friendly_errors
def init(ctx: click.Context, skip_model: bool, skip_image: bool, skip_harnesses: bool) -> None:
    """Prepare the data directory: store, Podman config, bundled model, sandbox and harness images (idempotent)."""
    from appliance.setup import initialise

    initialise(settings_of(ctx), model=not skip_model, image=not skip_image, harnesses=not skip_harnesses,
               log=lambda m: click.echo(m, err=True))


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
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@friendly_errors
def backup(ctx: click.Context, dest: Path) -> None:
    """Copy the store to DEST consistently, while the appliance runs (checkpoints are plain files)."""
    from appliance.store import Store

    store = Store(settings_of(ctx).db_path)
    try:
        store.backup(dest)
    finally:
        store.close()
    click.echo(f"store backed up to {dest}")


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
    from appliance.store import Store
    from appliance.tasks import load_task

    settings = settings_of(ctx)
    spec = load_task(task_path)
    if harness != "builtin":
        from appliance.harness.external import harness_settings

        harness_settings(settings, harness)  # an unknown name fails before the engine starts
    store = Store(settings.db_path)
    with services(settings, store, log=lambda m: click.echo(m, err=True)) as svc:
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
        click.echo(f"rollout {d['rollout_id']}: {d['outcome']} (reward {d['reward']}) after {d['turns']} turns")
        if d["error"]:
            click.echo(f"  reason: {d['error']}")
        click.echo(f"  calls {d['calls']}, samples {d['samples']}, sampled tokens {d['sampled_tokens']}, "
                   f"re-tokenized tokens {d['retokenized_tokens']}, divergences {len(d['divergences'])}")
        click.echo(f"  `appliance rollout show {d['rollout_id']}` prints the trajectory")

    emit(data, as_json, human)


@rollout.command("show")
@click.argument("rollout_id")
@click.option("--json", "as_json", is_flag=True, help="Print the trajectory as JSON.")
@click.pass_context
@friendly_errors
def rollout_show(ctx: click.Context, rollout_id: str, as_json: bool) -> None:
    """Print a rollout's trajectory: sampled (model) tokens in green, prompt/tool tokens dim."""
    from appliance.rollout_view import rollout_view
    from appliance.store import Store

    settings = settings_of(ctx)
    decode = _decoder(settings)
    view = rollout_view(Store(settings.db_path), rollout_id, decode)

    def human(v: dict[str, Any]) -> None:
        r = v["rollout"]
        click.echo(f"rollout {r['id']} task {r['task']} harness {r['harness']}: {r['outcome']} reward {r['reward']}")
        for c in v["calls"]:
            click.echo(f"  call {c['seq']}: {c['status']} prompt {c['prompt_tokens']} + completion "
                       f"{c['completion_tokens']} tokens, {c['latency_s']} s")
        for s in v["samples"]:
            click.echo(click.style(f"--- sample (branch {s['branch']}): {s['tokens']} tokens, {s['sampled']} sampled",
                                   bold=True))
            for seg in s["segments"]:
                click.echo(click.style(seg["text"], fg="green") if seg["sampled"] else click.style(seg["text"], dim=True),
                           nl=False)
            click.echo()

    emit(view, as_json, human)


def _decoder(settings: Settings) -> Callable[[list[int]], str]:
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(settings.model_path))
        return lambda ids: str(tok.decode(ids))
    except Exception:  # no model folder: show the ids themselves
        return lambda ids: " ".join(map(str, ids))


@main.command()
@click.argument("iteration", type=int, required=False)
@click.option("--run", "run_id", default=None, help="Run to report on (default: the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print the report's JSON instead of its Markdown.")
@click.pass_context
@friendly_errors
def report(ctx: click.Context, iteration: int | None, run_id: str | None, as_json: bool) -> None:
    """Print the capability report of an iteration (default: the latest)."""
    from appliance.control import resolve_run
    from appliance.errors import NotFoundError
    from appliance.store import Store

    store = Store(settings_of(ctx).db_path)
    run = resolve_run(store, run_id)
    found = store.report(run.id, iteration)
    if found is None:
        which = f"iteration {iteration}" if iteration is not None else "any iteration"
        raise NotFoundError(f"run {run.id} has no report for {which}",
                            "reports are written at the end of each iteration; `appliance status` shows progress")
    data, markdown = found
    click.echo(json.dumps(data, indent=2) if as_json else markdown)


@main.command()
@click.option("--iterations", type=click.IntRange(1), default=None,
              help="Training iterations of the run (default loop.iterations); a restarted run continues its count.")
@click.option("--headless", is_flag=True, help="No TUI: log lines and a progress line (the default without a terminal).")
@click.pass_context
@friendly_errors
def run(ctx: click.Context, iterations: int | None, headless: bool) -> None:
    """Run the loop: synthesize, validate, practise, learn, evaluate, diagnose; resumes an unfinished run."""
    from appliance.app import run_appliance
    from appliance.lineage import start_label
    from appliance.store import Store

    settings = settings_of(ctx)
    headless = headless or not sys.stdout.isatty()
    run_id = run_appliance(settings, iterations=iterations, headless=headless,
                           log=lambda m: click.echo(m, err=True), progress=lambda m: click.echo(m, err=True))
    store = Store(settings.db_path)
    click.echo(f"run {run_id}: {store.get_run(run_id).status}")
    from appliance.evaluate import learning_curve as curve_with_intervals

    click.echo("held-out learning curve (iteration: pass@1 [95 % interval]):")
    for it, p in curve_with_intervals(store, run_id):
        click.echo(f"  {it}: {p.describe()}" + (f"  ({start_label(store, run_id)})" if it == 0 else ""))


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
        click.echo(d["model"]["line"])
        click.echo("rows: " + ", ".join(f"{k} {v}" for k, v in d["counts"].items()))

    emit(data, as_json, human)


@main.group()
def sandbox() -> None:
    """Podman sandboxes: run a command in one, clean up leftovers."""


@sandbox.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("--json", "as_json", is_flag=True, help="Print exit_code, stdout, stderr, duration_s as JSON.")
@click.option("--workspace", type=click.Path(path_type=Path), default=None,
              help="Host directory copied to /workspace and back when CMD ends; default: a fresh empty one.")
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


@main.group()
def tasks() -> None:
    """Practice tasks: synthesize, list, show, validate a task of your own, list the families."""


@tasks.command("families")
@click.option("--json", "as_json", is_flag=True, help="Print the families as JSON.")
def tasks_families(as_json: bool) -> None:
    """The procedural task families (each has levels 1..5)."""
    from appliance.tasks.families import FAMILIES

    rows = {name: mod.DESCRIPTION for name, mod in FAMILIES.items()}
    emit(rows, as_json, lambda d: click.echo("\n".join(f"{k:<10} {v}" for k, v in d.items())))


@tasks.command("synth")
@click.option("--family", "family", required=True, help="Task family (`appliance tasks families` lists them).")
@click.option("--level", type=click.IntRange(1, 5), required=True, help="Difficulty level 1..5.")
@click.option("-n", "n", type=click.IntRange(1), default=10, show_default=True, help="Number of tasks.")
@click.option("--seed", default="0", show_default=True, help="Seed: the same seed gives the same tasks.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one task directory per task here instead of adding them to the store.")
@click.option("--validate", is_flag=True, help="Also validate them agent-free in sandboxes (store only).")
@click.option("--json", "as_json", is_flag=True, help="Print the task ids (and verdicts) as JSON.")
@click.pass_context
@friendly_errors
def tasks_synth(ctx: click.Context, family: str, level: int, n: int, seed: str, out: Path | None,
                validate: bool, as_json: bool) -> None:
    """Generate N tasks of one family and level, into the store (status proposed) or --out DIR."""
    from appliance.schemas import Split, Task, TaskStatus
    from appliance.store import Store
    from appliance.tasks import write_task
    from appliance.tasks.families import synthesize
    from appliance.tasks.heldout import heldout_ids
    from appliance.tasks.validate import admit

    settings = settings_of(ctx)
    store = Store(settings.db_path)
    specs = synthesize(family, level, n, seed=seed, exclude=heldout_ids(store))
    rows: list[dict[str, Any]] = []
    if out is not None:
        rows = [{"id": s.id, "path": str(write_task(s, out / s.id))} for s in specs]
    elif validate:
        rows = [{"id": s.id, "ok": v.ok, "reason": v.reason} for s, v in admit(settings, store, specs)]
    else:
        for s in specs:
            added = store.add_task(Task(s.id, None, s.family, s.difficulty, s.source, Split.TRAIN,
                                        TaskStatus.PROPOSED, s.to_spec()))
            rows.append({"id": s.id, "added": added})

    def human(rs: list[dict[str, Any]]) -> None:
        for r in rs:
            click.echo(" ".join(str(v) for v in r.values()))
        if len(specs) < n:
            click.echo(f"only {len(specs)} distinct tasks exist at this level for this seed", err=True)

    emit(rows, as_json, human)


@tasks.command("list")
@click.option("--run", "run_id", default=None, help="Only tasks of this run.")
@click.option("--family", default=None, help="Only this family.")
@click.option("--status", default=None, help="proposed, valid, learnable, too_easy, too_hard or rejected.")
@click.option("--split", default=None, type=click.Choice(["train", "heldout"]), help="Only this split.")
@click.option("--json", "as_json", is_flag=True, help="Print the tasks as JSON.")
@click.pass_context
@friendly_errors
def tasks_list(ctx: click.Context, run_id: str | None, family: str | None, status: str | None, split: str | None,
               as_json: bool) -> None:
    """The task pool in the store."""
    from appliance.schemas import Split, TaskStatus
    from appliance.store import Store

    if status is not None and status not in set(TaskStatus):
        raise ApplianceError(f"unknown status {status!r}", f"use one of: {', '.join(TaskStatus)}")
    found = Store(settings_of(ctx).db_path).tasks(run_id, split=Split(split) if split else None,
                                                  status=TaskStatus(status) if status else None, family=family)
    rows = [{"id": t.id, "family": t.family, "difficulty": t.difficulty, "source": t.source, "split": t.split,
             "status": t.status, "pass_rate": t.pass_rate, "reject_reason": t.reject_reason} for t in found]

    def human(rs: list[dict[str, Any]]) -> None:
        for r in rs:
            extra = f"  ({r['reject_reason']})" if r["reject_reason"] else ""
            click.echo(f"{r['id']:<32} {r['family']:<9} L{r['difficulty']} {r['split']:<7} {r['status']}{extra}")
        click.echo(f"{len(rs)} task(s)")

    emit(rows, as_json, human)


@tasks.command("show")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the task row and its spec as JSON.")
@click.pass_context
@friendly_errors
def tasks_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """One task: instruction, workspace files, setup, verifier, reference solution, verdict."""
    from appliance.store import Store
    from appliance.tasks import TaskSpec
    from appliance.tasks.format import dumps_toml

    t = Store(settings_of(ctx).db_path).get_task(task_id)
    if as_json:
        click.echo(json.dumps({"id": t.id, "run_id": t.run_id, "split": t.split, "status": t.status,
                               "reject_reason": t.reject_reason, "pass_rate": t.pass_rate, "spec": t.spec},
                              indent=2, default=str))
        return
    click.echo(f"# {t.id}: {t.family} level {t.difficulty}, {t.source}, {t.split}, {t.status}"
               + (f" ({t.reject_reason})" if t.reject_reason else ""))
    click.echo(dumps_toml(TaskSpec.from_spec(t.spec)))


@tasks.command("validate")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the verdict and every stage as JSON.")
@click.pass_context
@friendly_errors
def tasks_validate(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Check a task directory or .toml file agent-free in sandboxes; explain each failed stage. Exit 0 if valid."""
    from appliance.tasks import load_task, validate_agent_free

    result = validate_agent_free(settings_of(ctx), load_task(path))

    def human(_: Any) -> None:
        for s in result.stages:
            mark = click.style("ok  ", fg="green") if s.ok else click.style("FAIL", fg="red")
            click.echo(f"{mark} {s.name} ({s.duration_s:.2f} s)")
            if not s.ok and s.detail:
                click.echo("       " + s.detail.strip().replace("\n", "\n       ")[-1200:])
        click.echo("valid" if result.ok else f"rejected: {result.reason}")

    emit(result.as_dict(), as_json, human)
    sys.exit(0 if result.ok else 1)


@main.group()
def model() -> None:
    """The model this data directory belongs to: show its lineage, or switch to another base."""


@model.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print what is served and every lineage with its versions as JSON.")
@click.pass_context
@friendly_errors
def model_show(ctx: click.Context, as_json: bool) -> None:
    """What is served (base, version, adapter) and each lineage's policy versions with how they were made."""
    from appliance.lineage import show
    from appliance.store import Store

    data = show(Store(settings_of(ctx).db_path))

    def human(d: dict[str, Any]) -> None:
        click.echo(d["line"])
        for lin in d["lineages"]:
            click.echo(f"lineage {lin['id']}: {lin['base_name']} at {lin['base_path']} ({lin['reason']})")
            for v in lin["versions"]:
                click.echo(f"  {'base' if v['version'] == 0 else 'v' + str(v['version'])}: {v['made_by']}")

    emit(data, as_json, human)


@model.command("use")
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.pass_context
@friendly_errors
def model_use(ctx: click.Context, path: Path | None) -> None:
    """Make PATH (default: the configured engine.model) the base of a new lineage in this data directory.

    Policy versions count from 0 again on it; the old lineage's runs, reports and checkpoints are kept.
    """
    from appliance.lineage import use_model
    from appliance.store import Store

    lin = use_model(settings_of(ctx), Store(settings_of(ctx).db_path), path)
    click.echo(f"lineage {lin['id']}: {lin['base_name']} at {lin['base_path']}; the next start serves it as version 0")


@main.command("export")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--version", "version", type=click.IntRange(0), default=None,
              help="Policy version to export (default: the one the engine serves).")
@click.option("--adapter", is_flag=True, help="Write the peft adapter alone instead of the merged model.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
@friendly_errors
def export_cmd(ctx: click.Context, dest: Path, version: int | None, adapter: bool, as_json: bool) -> None:
    """Write a policy version to DEST as a Hugging Face folder with a model card (LoRA merged by default)."""
    from appliance.store import Store
    from appliance.training.export import export_version

    result = export_version(Store(settings_of(ctx).db_path), dest, version=version, adapter=adapter)
    data = {"dest": str(result.dest), "version": result.version, "kind": result.kind, "bytes": result.bytes}
    emit(data, as_json, lambda d: click.echo(f"exported version {d['version']} ({d['kind']}, "
                                             f"{d['bytes'] / 2**20:.1f} MiB) to {d['dest']}; model card: README.md"))


if __name__ == "__main__":
    main()


@main.command()
@click.option("--steps", type=click.IntRange(1), default=1, show_default=True,
              help="GRPO optimizer steps; the kept groups are dealt over them.")
@click.option("--run", "run_id", default=None, help="Run whose practice rollouts to train on (default: the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print per-step metrics, phase timings and the checkpoint as JSON.")
@click.pass_context
@friendly_errors
def train(ctx: click.Context, steps: int, run_id: str | None, as_json: bool) -> None:
    """Train on the serving policy's practised rollouts (training.method), then sync and check the engine.

    Starts the engine (it must not be running in another process), pauses it, trains, loads the new
    weights, passes the canary, stops it. The loop does the same inside a run without the restart.
    """
    from appliance.errors import ApplianceError
    from appliance.serving import Engine
    from appliance.store import Store
    from appliance.training.data import train_on_practice

    settings = settings_of(ctx)
    store = Store(settings.db_path)
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
            click.echo(f"step {i}: " + "  ".join(f"{k}={m[k]:.4g}" for k in keys if k in m))
        click.echo("phase: " + "  ".join(f"{k}={v:.2f}" for k, v in d["timings"].items()))
        click.echo(f"policy version {d['policy_version']}" + (f" <- {d['checkpoint']}" if d["checkpoint"] else ""))

    emit(data, as_json, human)
