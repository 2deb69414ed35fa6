"""`appliance eval`: the policy measured on task sets you bring (appliance.benchmark)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from appliance.cli.base import echo, emit, friendly_errors, inert, main, open_store, settings_of, sigterm_stops_cleanly
from appliance.errors import ApplianceError


@main.command("eval")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--version", "version", type=click.IntRange(0), default=None,
              help="The stored policy version to measure (`appliance model` lists them; default: the version the "
                   "loop serves). It is served for this evaluation only: the loop's next start serves its own.")
@click.option("--base", is_flag=True, help="Measure the base model (version 0).")
@click.option("--attempts", "k", type=click.IntRange(1, 64), default=None,
              help="Rollouts per task (default: evaluation.samples_per_task).")
@click.option("--harness", default=None, help="builtin, or a name under [harnesses] (default: loop.harness).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary (and every rollout) as JSON.")
@click.pass_context
@friendly_errors
def eval_(ctx: click.Context, paths: tuple[Path, ...], version: int | None, base: bool, k: int | None,
          harness: str | None, as_json: bool) -> None:
    """Measure the policy on task directories (the appliance's format, Harbor, Terminal-Bench 1) or folders
    of them: each task validated by its oracle (exclusions named with their reason), then K rollouts each
    through the loop's own engine, proxy, sandboxes, harness and verifier; a line per rollout as it ends,
    then pass@1 with its 95 % interval per family and level, infra errors apart; the summary is stored
    (table eval_sets). Refused while a loop runs on this data directory."""
    from appliance.app import services
    from appliance.benchmark import describe, evaluate_set, new_eval_id, practice_runner
    from appliance.tasks.foreign import validate_sets
    from appliance.tasks.harbor import task_image

    if base and version not in (None, 0):
        raise click.UsageError("give --version N or --base, not both")
    wanted = 0 if base else version
    settings = settings_of(ctx)
    harness = harness or settings.loop.harness
    k = k or settings.evaluation.samples_per_task
    if harness != "builtin":
        from appliance.harness.external import harness_settings

        harness_settings(settings, harness)  # an unknown name fails before anything starts

    def log(message: str) -> None:  # progress on stderr, also under --json (stdout is the JSON)
        echo(message, err=True)

    with open_store(settings) as store, store.loop_lock():
        if wanted is not None:  # a version that cannot be served is refused before minutes of validation
            from appliance.serving.weights import stored_weights

            stored_weights(store, settings.model_path, wanted, settings.engine.served_model_name)
        valid, _ = validate_sets(settings, list(paths), log=log)
        for e in valid.excluded:
            echo(f"excluded {e.path}: {e.reason}", err=True)
        echo(f"{len(valid.specs)} of {len(valid.specs) + len(valid.excluded)} task(s) passed validation", err=True)
        own = [s.id for s in valid.specs if task_image(s)]
        if own and harness != "builtin":
            raise ApplianceError(f"{len(own)} task(s) bring their own environment ({', '.join(own[:3])}), which "
                                 f"harness {harness!r} cannot run in yet", "use --harness builtin for them")
        if not valid.specs:
            raise ApplianceError("no task of the set passed validation", "see each exclusion's reason above")
        with sigterm_stops_cleanly(), services(settings, store, log=log, version=wanted) as svc:
            served = svc.engine.policy_version

            def line(r: Any) -> None:  # as each rollout ends; on stderr under --json (stdout is the JSON)
                reward = "-" if r.reward is None else f"{r.reward:g}"
                echo(f"{inert(r.task_id or '?'):<28} {r.outcome or '?':<12} reward {reward}"
                     + (f"  {inert(r.error)[:100]}" if r.error else ""), err=as_json)

            eval_id = new_eval_id()
            summary = evaluate_set(store, valid.specs, policy_version=served, k=k, harness=harness,
                                   run=practice_runner(svc.practice, line), eval_id=eval_id)
        summary["excluded"] = [{"path": e.path, "reason": e.reason} for e in valid.excluded]
        summary["policy_version"], summary["harness"] = served, harness
        store.add_eval_set(eval_id, paths=[str(p) for p in paths], policy_version=served, harness=harness, k=k,
                           summary=summary)

    def human(s: dict[str, Any]) -> None:
        echo(f"{s['id']}: policy version {s['policy_version']}, {describe(s)}")
        for fam, c in s["by_family"].items():
            echo(f"  {inert(fam):<20} {c['pass_at_1']:.1%} [{c['low']:.1%}, {c['high']:.1%}] "
                 f"({int(c['passed'])}/{int(c['n'])})")
        if s["excluded"]:
            echo(f"  {len(s['excluded'])} task(s) excluded (reasons above)")

    emit(summary, as_json, human)
    sys.exit(0)

