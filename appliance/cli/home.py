"""Commands for the data directory and its model: version, config, init, doctor, plan, status, backup, model, export."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from appliance import __version__
from appliance.cli.base import echo, emit, friendly_errors, inert, main, open_store, settings_of
from appliance.config import describe_fields


@main.command()
def version() -> None:
    """Print the appliance version."""
    echo(__version__)


@main.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print the effective settings as JSON.")
@click.pass_context
@friendly_errors
def config_cmd(ctx: click.Context, as_json: bool) -> None:
    """Print every setting: key, effective value, help text."""
    settings = settings_of(ctx)
    if as_json:
        echo(settings.model_dump_json(indent=2))
        return
    effective = settings.model_dump()
    for key, _default, help_text in describe_fields():
        value: Any = effective
        for part in key.split("."):
            value = value[part]
        echo(f"{key} = {value!r}\n    {help_text}")


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
               log=lambda m: echo(m, err=True))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--no-gpu", is_flag=True,
              help="Report missing GPUs as absent, not failed (trying the gpu image without one).")
@click.pass_context
@friendly_errors
def doctor(ctx: click.Context, as_json: bool, no_gpu: bool) -> None:
    """Check that the appliance can run here; explain each problem with a fix. Exit 0 only when ready."""
    from appliance.doctor import run_checks

    checks = run_checks(settings_of(ctx), gpu_absent_ok=no_gpu)
    ok = all(c.ok or not c.required for c in checks)

    def human(_: Any) -> None:
        for c in checks:
            mark = click.style("ok  ", fg="green") if c.ok else click.style(
                "FAIL" if c.required else "warn", fg="red" if c.required else "yellow")
            click.echo(f"{mark} {inert(c.name)}: {inert(c.detail)}")
            if not c.ok and c.hint:
                echo(f"       fix: {c.hint}")
        echo("ready" if ok else "not ready")

    emit({"ok": ok, "checks": [c.as_dict() for c in checks]}, as_json, human)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--model", "model_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Model folder whose config.json to plan for (default: engine.model; no weights are read).")
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs to plan for (default: the visible ones).")
@click.option("--gpu-memory", type=click.FloatRange(min=1), default=None,
              help="Memory of one GPU in GB (default: the smallest visible one's).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_context
@friendly_errors
def plan(ctx: click.Context, model_dir: Path | None, gpus: int | None, gpu_memory: float | None, as_json: bool) -> None:
    """The memory arithmetic of serving and training this model here, and the settings it recommends."""
    from appliance.plan import PlanError, detect_gpus, make_plan, read_model, render

    settings = settings_of(ctx)
    if gpus is None or gpu_memory is None:
        seen = detect_gpus()
        if seen is None:
            raise PlanError("no GPU visible (nvidia-smi found none)",
                            "plan for a GPU server from here with --gpus N --gpu-memory GB "
                            "(an H100 is 80, an H200 141)")
        gpus, gpu_memory = gpus or seen[0], gpu_memory or seen[1]
    result = make_plan(read_model(model_dir or settings.model_path), settings, gpus, gpu_memory)
    emit(result.as_dict(), as_json, lambda _: click.echo(render(result)))


@main.command()
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@friendly_errors
def backup(ctx: click.Context, dest: Path) -> None:
    """Copy the store to DEST consistently, while the appliance runs (checkpoints are plain files)."""
    with open_store(settings_of(ctx)) as store:
        store.backup(dest)
    echo(f"store backed up to {dest}")


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
        echo(f"store: {d['store']}")
        echo(f"run: {run['id']} ({run['status']})" if run else "run: none yet (start one with `appliance run`)")
        for it in d["iterations"]:
            echo(f"  iteration {it['index']}: {it['phase']} {it['status']}")
        echo(d["loop"]["line"])
        echo(f"engine: {d['engine']['state']} (policy version {d['engine']['policy_version']})")
        echo(d["model"]["line"])
        echo("rows: " + ", ".join(f"{k} {v}" for k, v in d["counts"].items()))

    emit(data, as_json, human)


@main.group()
def model() -> None:
    """The model this data directory belongs to: show its lineage, or switch to another base."""


@model.command("show")
@click.option("--json", "as_json", is_flag=True,
              help="Print what is served and every lineage with its versions as JSON.")
@click.pass_context
@friendly_errors
def model_show(ctx: click.Context, as_json: bool) -> None:
    """What is served (base, version, adapter) and each lineage's policy versions with how they were made."""
    from appliance.lineage import show

    with open_store(settings_of(ctx)) as store:
        data = show(store)

    def human(d: dict[str, Any]) -> None:
        echo(d["line"])
        for lin in d["lineages"]:
            echo(f"lineage {lin['id']}: {lin['base_name']} at {lin['base_path']} ({lin['reason']})")
            for v in lin["versions"]:
                echo(f"  {'base' if v['version'] == 0 else 'v' + str(v['version'])}: {v['made_by']}")

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

    with open_store(settings_of(ctx)) as store:
        lin = use_model(settings_of(ctx), store, path)
    echo(f"lineage {lin['id']}: {lin['base_name']} at {lin['base_path']}; the next start serves it as version 0")


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
    from appliance.training.export import export_version

    with open_store(settings_of(ctx)) as store:
        result = export_version(store, dest, version=version, adapter=adapter)
    data = {"dest": str(result.dest), "version": result.version, "kind": result.kind, "bytes": result.bytes}
    emit(data, as_json, lambda d: echo(f"exported version {d['version']} ({d['kind']}, "
                                             f"{d['bytes'] / 2**20:.1f} MiB) to {d['dest']}; model card: README.md"))
