"""Commands for the practice tasks: families, synth, list, show, validate, import."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from appliance.cli.base import echo, emit, friendly_errors, inert, main, open_store, settings_of
from appliance.errors import ApplianceError


@main.group()
def tasks() -> None:
    """Practice tasks: synthesize, list, show, validate a task of your own, import a benchmark, list the families."""


@tasks.command("families")
@click.option("--json", "as_json", is_flag=True, help="Print the families as JSON.")
def tasks_families(as_json: bool) -> None:
    """The procedural task families (each has levels 1..5)."""
    from appliance.tasks.families import FAMILIES

    rows = {name: mod.DESCRIPTION for name, mod in FAMILIES.items()}
    emit(rows, as_json, lambda d: echo("\n".join(f"{k:<10} {v}" for k, v in d.items())))


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
    from appliance.schemas import Split
    from appliance.tasks import write_task
    from appliance.tasks.families import synthesize
    from appliance.tasks.heldout import heldout_ids
    from appliance.tasks.validate import admit

    settings = settings_of(ctx)
    with open_store(settings) as store:
        specs = synthesize(family, level, n, seed=seed, exclude=heldout_ids(store))
        rows: list[dict[str, Any]] = []
        if out is not None:
            rows = [{"id": s.id, "path": str(write_task(s, out / s.id))} for s in specs]
        elif validate:
            rows = [{"id": s.id, "ok": v.ok, "reason": v.reason} for s, v in admit(settings, store, specs)]
        else:
            for s in specs:
                added = store.add_task(s.task_row(None, Split.TRAIN))
                rows.append({"id": s.id, "added": added})

    def human(rs: list[dict[str, Any]]) -> None:
        for r in rs:
            echo(" ".join(str(v) for v in r.values()))
        if len(specs) < n:
            echo(f"only {len(specs)} distinct tasks exist at this level for this seed", err=True)

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

    if status is not None and status not in set(TaskStatus):
        raise ApplianceError(f"unknown status {status!r}", f"use one of: {', '.join(TaskStatus)}")
    with open_store(settings_of(ctx)) as store:
        found = store.tasks(run_id, split=Split(split) if split else None,
                            status=TaskStatus(status) if status else None, family=family)
    rows = [{"id": t.id, "family": t.family, "difficulty": t.difficulty, "source": t.source, "split": t.split,
             "status": t.status, "pass_rate": t.pass_rate, "reject_reason": t.reject_reason} for t in found]

    def human(rs: list[dict[str, Any]]) -> None:
        for r in rs:
            extra = f"  ({r['reject_reason']})" if r["reject_reason"] else ""
            echo(f"{r['id']:<32} {r['family']:<9} L{r['difficulty']} {r['split']:<7} {r['status']}{extra}")
        echo(f"{len(rs)} task(s)")

    emit(rows, as_json, human)


@tasks.command("show")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the task row and its spec as JSON.")
@click.pass_context
@friendly_errors
def tasks_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """One task: instruction, workspace files, setup, verifier, reference solution, verdict."""
    from appliance.tasks import TaskSpec
    from appliance.tasks.format import dumps_toml

    with open_store(settings_of(ctx)) as store:
        t = store.get_task(task_id)
    if as_json:
        echo(json.dumps({"id": t.id, "run_id": t.run_id, "split": t.split, "status": t.status,
                         "reject_reason": t.reject_reason, "pass_rate": t.pass_rate, "spec": t.spec},
                        indent=2, default=str))
        return
    echo(f"# {t.id}: {t.family} level {t.difficulty}, {t.source}, {t.split}, {t.status}"
         + (f" ({t.reject_reason})" if t.reject_reason else ""))
    echo(dumps_toml(TaskSpec.of(t)))


@tasks.command("validate")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the verdict and every stage as JSON.")
@click.pass_context
@friendly_errors
def tasks_validate(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Check a task directory or .toml file agent-free in sandboxes; explain each failed stage. Exit 0 if valid.

    A Harbor or Terminal-Bench 1 directory, or a folder of task directories, is validated by its oracle:
    its environment built, the reference solution must pass the tests and the untouched workspace fail
    them; the answer counts the tasks that passed and gives each exclusion's reason."""
    from appliance.tasks import load_task, validate_agent_free
    from appliance.tasks.harbor import is_foreign

    if is_foreign(path) or (path.is_dir() and not (path / "task.toml").is_file()):
        _validate_set(settings_of(ctx), path, as_json)
        return
    result = validate_agent_free(settings_of(ctx), load_task(path))

    def human(_: Any) -> None:
        for s in result.stages:
            mark = click.style("ok  ", fg="green") if s.ok else click.style("FAIL", fg="red")
            click.echo(f"{mark} {inert(s.name)} ({s.duration_s:.2f} s)")
            if not s.ok and s.detail:
                echo("       " + s.detail.strip().replace("\n", "\n       ")[-1200:])
        echo("valid" if result.ok else f"rejected: {result.reason}")

    emit(result.as_dict(), as_json, human)
    sys.exit(0 if result.ok else 1)


def _validate_set(settings: Any, path: Path, as_json: bool) -> None:
    from appliance.tasks.foreign import validate_sets

    valid, stages = validate_sets(settings, [path], log=lambda m: echo(m, err=True))
    total = len(valid.specs) + len(valid.excluded)

    def human(_: Any) -> None:
        for spec in valid.specs:
            echo(f"valid    {spec.id}" + "".join(f"\n         note: {n}" for n in spec.meta.get("notes", [])))
        for e in valid.excluded:
            echo(f"excluded {e.path}: {e.reason}")
        echo(f"{len(valid.specs)} of {total} task(s) passed validation")

    emit({**valid.as_dict(), "stages": stages, "passed": len(valid.specs), "total": total}, as_json, human)
    sys.exit(0 if valid.specs and not valid.excluded else 1)


@tasks.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["intercode"]), default="intercode", show_default=True,
              help="The input's format: a JSON list or JSON lines of {query, gold, setup?, files?}.")
@click.option("--setup", "setup_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A bash script every entry's workspace is built with (before the entry's own setup).")
@click.option("--root", default="/testbed", show_default=True,
              help="The benchmark's file system root; it becomes /workspace in queries, commands, setups, files.")
@click.option("--family", default="intercode", show_default=True, help="The family the tasks are filed under.")
@click.option("--difficulty", type=click.IntRange(1, 5), default=2, show_default=True, help="Their level 1..5.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, 3600, min_open=True), default=30.0,
              show_default=True, help="Seconds each command (setup, gold, the agent's) may run.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one task directory per valid task here instead of adding them to the store.")
@click.option("--json", "as_json", is_flag=True, help="Print one row per entry (id, verdict, error) as JSON.")
@click.pass_context
@friendly_errors
def tasks_import(ctx: click.Context, file: Path, fmt: str, setup_file: Path | None, root: str, family: str,
                 difficulty: int, timeout_s: float, out: Path | None, as_json: bool) -> None:
    """Convert benchmark entries into tasks: the gold command's output and workspace are the check.

    Runs each gold command in a sandbox, then validates every task (docs/TASKS.md, "Importing tasks");
    valid tasks enter the store (or --out DIR), rejected ones are stored with their reason. Exit 0 when
    every entry became a valid task."""
    from appliance.tasks.format import Limits
    from appliance.tasks.importing import import_file

    settings = settings_of(ctx)
    setup = setup_file.read_text(encoding="utf-8") if setup_file else ""
    options: dict[str, Any] = dict(setup=setup, root=root, family=family, difficulty=difficulty,
                                   limits=Limits(max_turns=8, command_timeout_s=timeout_s, setup_timeout_s=timeout_s))
    if out is not None:
        rows = import_file(settings, file, None, out=out, **options)
    else:
        with open_store(settings) as store:
            rows = import_file(settings, file, store, **options)

    def human(rs: list[dict[str, Any]]) -> None:
        for r in rs:
            echo(f"entry {r['entry']}: {r['id']} valid" if r["ok"] else str(r["error"]), err=not r["ok"])
        echo(f"{sum(r['ok'] for r in rs)} of {len(rs)} entries imported")

    emit(rows, as_json, human)
    sys.exit(0 if rows and all(r["ok"] for r in rows) else 1)
