"""The capability report: what the agent can and cannot do after an iteration, from the store alone.

JSON drives the next round (weak families, difficulty moves); Markdown is for people. The short analysis
is written by the policy itself through a `generate_text` callable (no external model); without one the
report says so instead of inventing text.

Failure modes come from the rollout's outcome and the reason recorded with it (`rollouts.error`, read
with `schemas.FailureMode.read`); an infra error is counted by the first word of its cause.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from appliance.agent_habits import first_command, habits
from appliance.errors import Interrupted
from appliance.learning_signal import render_markdown as render_learning_signal
from appliance.lineage import describe_version, start_label
from appliance.schemas import CapabilityReport, FailureMode, Outcome, Rollout, Task, TaskStatus
from appliance.store import Store
from appliance.tasks.difficulty import wilson
from appliance.tool_health import render_markdown as render_tool_health
from appliance.tool_health import tool_health

# read as its outcome's default: infra on a rollout that is no infra error (nothing writes that). A
# verifier_timeout is its own mode: practice scores it as the agent's failure (what the agent left made the
# verifier hang, so it stays in the loss), but it is not a wrong answer and the report says so.
UNCOUNTED = (FailureMode.INFRA,)


def failure_mode(rollout: Rollout) -> str | None:
    """The failure mode of a finished rollout; None for a success. An infra error is "infra:<first word of
    its cause>" (e.g. "infra:sandbox"); a rollout whose error names no mode gets its outcome's default."""
    if rollout.outcome == Outcome.SUCCESS:
        return None
    mode, detail = FailureMode.read(rollout.error)
    if rollout.outcome == Outcome.INFRA_ERROR:
        words = detail.split()  # the cause; all of the text when it names no mode (practice always names one)
        return f"{FailureMode.INFRA.value}:{words[0] if words else 'unknown'}"
    if mode is not None and mode not in UNCOUNTED:
        return mode.value
    return (FailureMode.TURN_LIMIT if rollout.outcome == Outcome.TRUNCATED else FailureMode.WRONG_ANSWER).value


def _cells(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for r in rows:
        n, p = r["n"], r["passed"]
        out[r["family"]][str(r["difficulty"])] = {"n": n, "passed": p, "pass_rate": p / n if n else 0.0}
    return dict(out)


def build_report(store: Store, run_id: str, iteration: int,
                 generate_text: Callable[[str], str] | None = None) -> tuple[CapabilityReport, str]:
    evals = store.evals(run_id)
    by_iter: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in evals:
        by_iter[e["iteration"]].append(e)
    current = by_iter.get(iteration, [])
    trend = [
        {"iteration": it, "pass_at_1": sum(r["passed"] for r in rows) / max(1, sum(r["n"] for r in rows)),
         "n": sum(r["n"] for r in rows)}
        for it, rows in sorted(by_iter.items())
    ]

    tasks = {t.id: t for t in store.tasks(run_id)}
    train_rollouts = [r for r in store.rollouts(run_id, iteration=iteration) if r.outcome is not None]
    train_cells: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    bare_cells: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])  # tasks without a hint
    modes: Counter[str] = Counter()
    for r in train_rollouts:
        mode = failure_mode(r)
        if mode:
            modes[mode] += 1
        task = tasks.get(r.task_id or "")
        if task and r.purpose in ("train", "validate") and r.outcome != Outcome.INFRA_ERROR:
            for cells in (train_cells, bare_cells) if not _hinted(task) else (train_cells,):
                cell = cells[(task.family, task.difficulty)]
                cell[0] += 1
                cell[1] += r.outcome == Outcome.SUCCESS
    def rows(cells: dict[tuple[str, int], list[int]]) -> list[dict[str, Any]]:
        return [{"family": f, "difficulty": d, "n": n, "passed": p} for (f, d), (n, p) in cells.items()]

    train = _cells(rows(train_cells))
    train_bare = _cells(rows(bare_cells))  # the controller's mastery: a hinted success shows the hint works
    heldout = _cells(current)

    band: dict[str, Counter[str]] = defaultdict(Counter)
    for t in tasks.values():
        if t.split == "train" and t.status in (TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD):
            band[t.family][str(t.status)] += 1

    regressions, within_noise = regressions_of(current, by_iter.get(iteration - 1, []))

    family_rates = {}
    for family, levels in train.items():  # practice only: what steers the curriculum never reads the held-out set
        n = sum(c["n"] for c in levels.values())
        family_rates[family] = sum(c["passed"] for c in levels.values()) / n if n else 0.0
    weak = sorted(family_rates, key=lambda f: family_rates[f])
    valid = [r for r in train_rollouts if r.outcome != Outcome.INFRA_ERROR]
    version = current[0]["policy_version"] if current else None
    report = CapabilityReport(
        run_id=run_id,
        iteration=iteration,
        policy_version=version,
        heldout_pass_at_1=trend[-1]["pass_at_1"] if trend and trend[-1]["iteration"] == iteration else None,
        heldout=heldout,
        train=train,
        train_bare=train_bare,
        trend=trend,
        failure_modes=dict(modes),
        infra_error_rate=(len(train_rollouts) - len(valid)) / len(train_rollouts) if train_rollouts else 0.0,
        rollouts=len(train_rollouts),
        refused_syncs=[{k: e.data.get(k) for k in ("policy_version", "reason", "checkpoint")}
                       for e in store.latest_events(run_id, limit=20, kinds=("rollback",))
                       if e.data.get("iteration") == iteration],
        regressions=regressions,
        regressions_within_noise=within_noise,
        regression_rule=REGRESSION_RULE,
        band={f: dict(c) for f, c in band.items()},
        family_pass_rate=family_rates,
        weak_families=weak,
        model=_model(store, run_id, version),
        band_levels=band_levels(tasks.values(), iteration),
        capability=capability(store, train_rollouts, tasks),
        habits=habits(store, train_rollouts),
        demonstrations=store.demonstration_counts(run_id),
        devset=devset_block(store, run_id, iteration),
        self_proposal=proposal_yield(store, run_id, iteration, tasks.values(), train_rollouts),
        tool_health=tool_health(store, train_rollouts, {t.id: t.family for t in tasks.values()}),
    )
    report.analysis = _analysis(report, generate_text)
    operations = {op for cells in report.capability.values() for c in cells.values() for op in c["operations"]}
    verdict = analysis_quality(report.analysis, sorted({*report.capability, *family_rates, *operations}))
    if generate_text is not None and verdict and not report.analysis.startswith("("):
        report.analysis_withheld = {"text": report.analysis[:500], "why": verdict}
        report.analysis = f"(the policy's analysis was withheld: {verdict})"
    return report, render_markdown(report)


REGRESSION_RULE = ("a held-out cell regressed when its 95 % Wilson interval lies wholly below the previous "
                   "iteration's (the two intervals do not overlap); a smaller drop is within noise")


def regressions_of(current: list[dict[str, Any]], previous: list[dict[str, Any]]
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Held-out cells (evals rows) whose pass rate went down since the previous iteration: (regressions,
    within noise). A cell holds a few rollouts (4 by default), so 1/4 -> 0/4 is what sampling alone gives;
    only a drop whose two Wilson intervals do not overlap is reported as a regression. Non-overlap is a
    conservative test (stricter than a two-proportion test at 5 %): a listed regression is one to act on."""
    before = {(r["family"], r["difficulty"]): r for r in previous}
    found: list[dict[str, Any]] = []
    noise: list[dict[str, Any]] = []
    for row in current:
        prev = before.get((row["family"], row["difficulty"]))
        if not (prev and prev["n"] and row["n"]) or row["passed"] / row["n"] >= prev["passed"] / prev["n"]:
            continue
        was, now = wilson(prev["passed"], prev["n"]), wilson(row["passed"], row["n"])
        cell = {"family": row["family"], "difficulty": row["difficulty"],
                "before": prev["passed"] / prev["n"], "after": row["passed"] / row["n"],
                "before_counts": [prev["passed"], prev["n"]], "after_counts": [row["passed"], row["n"]],
                "before_interval": list(was), "after_interval": list(now)}
        (found if now[1] < was[0] else noise).append(cell)
    return found, noise


def _model(store: Store, run_id: str, version: int | None) -> dict[str, Any]:
    """Which model the report is about: the base of the run's lineage and the version evaluated."""
    lineage_id = store.run_lineage(run_id)
    lineage = store.get_lineage(lineage_id) if lineage_id is not None else None
    return {"base": lineage["base_name"] if lineage else None, "lineage": lineage_id,
            "base_hash": lineage["content_hash"][:12] if lineage else None,
            "policy_version": version, "start": start_label(store, run_id),
            "describe": describe_version(store, version, lineage_id) if version is not None else "not evaluated"}


def _hinted(task: Any) -> bool:
    """Whether a task carries a rung of the families' hint ladder (spec.meta["hint"])."""
    return bool((task.spec.get("meta") or {}).get("hint"))


def band_levels(tasks: Any, iteration: int) -> dict[str, dict[str, dict[str, int]]]:
    """Band verdicts of this iteration's unhinted tasks per family and level (per iteration, not over the
    run): what the controller reads as a level being too easy or too hard."""
    out: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for t in tasks:
        if (t.split == "train" and t.iteration == iteration and not _hinted(t)
                and t.status in (TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD)):
            out[t.family][str(t.difficulty)][str(t.status)] += 1
    return {f: {lvl: dict(c) for lvl, c in cells.items()} for f, cells in out.items()}


def capability(store: Store, rollouts: list[Rollout], tasks: dict[str, Any], *,
               per_cell: int = 12) -> dict[str, dict[str, dict[str, Any]]]:
    """Computed from the data, per family (operation) and level: pass rate, failure modes, the most common
    wrong first commands, and one short example (a failed request and what the agent ran)."""
    cells: dict[tuple[str, int], list[Rollout]] = defaultdict(list)
    for r in rollouts:
        task = tasks.get(r.task_id or "")
        if task and r.purpose in ("train", "eval") and r.outcome not in (None, Outcome.INFRA_ERROR):
            cells[(task.family, task.difficulty)].append(r)
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (family, level), rs in sorted(cells.items()):
        passed = sum(r.outcome == Outcome.SUCCESS for r in rs)
        failed = [r for r in rs if r.outcome != Outcome.SUCCESS]
        ops: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # operation (spec.meta, where families name it)
        for r in rs:
            op = (tasks[r.task_id or ""].spec.get("meta") or {}).get("operation") or family
            ops[op][0] += 1
            ops[op][1] += r.outcome == Outcome.SUCCESS
        modes = Counter(failure_mode(r) for r in failed)
        wrong: Counter[str] = Counter()
        example = None
        for r in failed[:per_cell]:
            cmd = first_command(store, r.id)
            wrong[cmd or "(no command)"] += 1
            if example is None and cmd:
                instruction = " ".join(tasks[r.task_id or ""].spec.get("instruction", "").split())
                example = {"task": instruction[:160], "ran": cmd}
        out[family][str(level)] = {"n": len(rs), "passed": passed, "pass_rate": passed / len(rs),
                                   "failure_modes": dict(modes), "wrong_commands": wrong.most_common(3),
                                   "example": example,
                                   "operations": {op: {"n": n, "passed": p} for op, (n, p) in sorted(ops.items())}}
    return dict(out)


def analysis_quality(text: str, names: list[str]) -> str | None:
    """Why a policy-written analysis is not fit for the report, or None when it is: it must not repeat
    itself (a sentence or an 8-word run said twice) and must name at least one real task family."""
    words = text.lower().split()
    if len(words) < 5:
        return "too short"
    sentences = [" ".join(x.split()) for x in text.lower().replace("!", ".").replace("?", ".").split(".") if x.strip()]
    if len(sentences) != len(set(sentences)):
        return "it repeats a sentence"
    grams = [tuple(words[i:i + 8]) for i in range(max(0, len(words) - 7))]
    if len(grams) != len(set(grams)):
        return "it repeats itself"
    if not any(n.lower() in text.lower() for n in names):
        return "it names no task family it practised"
    return None


def _analysis(report: CapabilityReport, generate_text: Callable[[str], str] | None) -> str:
    if generate_text is None:
        return "(no analysis: the policy was not available to write one)"
    summary = ", ".join(f"{f} {r:.0%}" for f, r in report.family_pass_rate.items()) or "no tasks yet"
    modes = ", ".join(f"{m} {n}" for m, n in report.failure_modes.items()) or "none"
    prompt = (f"You are an agent reviewing your own practice results.\nPass rate per task family: {summary}.\n"
              f"Failure counts: {modes}.\nIn two sentences, say what you are weakest at and what to practise next.")
    try:
        return generate_text(prompt).strip()[:1500] or "(the policy wrote nothing)"
    except Interrupted:  # the shutdown broke the request: DIAGNOSE is redone at the next start, with its analysis
        raise
    except Exception as e:  # the report must not fail because the engine is busy
        return f"(no analysis: {e})"


def render_markdown(report: CapabilityReport) -> str:
    lines = [f"# Capability report — iteration {report.iteration}", ""]
    model = report.model
    if model:  # reports saved before lineages were recorded have no model block
        base = f"{model['base']} (lineage {model['lineage']}, {model['base_hash']})" if model["base"] \
            else "not recorded"
        lines += [f"**Model:** {model['describe']} · base {base} · the run started from {model['start']}  "]
    p = report.heldout_pass_at_1
    lines.append(f"**Held-out pass@1:** {'n/a' if p is None else f'{p:.1%}'}  ")
    lines.append("**Trend:** " + (" → ".join(f"{t['pass_at_1']:.1%}" for t in report.trend) or "n/a") + "  ")
    lines += render_devset(report)[:1]
    lines.append(f"**Infra-error rate:** {report.infra_error_rate:.1%} of {report.rollouts} rollouts")
    for refused in report.refused_syncs:
        lines[-1] += "  "
        lines.append(f"**Trained weights refused:** the engine rolled back this iteration's sync (version "
                     f"{refused['policy_version']}: {refused['reason']}); the previous policy served on, and training "
                     f"goes on from the refused weights ({refused['checkpoint']})")
    for title, table in (("Held-out pass@1 by family × difficulty", report.heldout),
                         ("Practice pass rate", report.train)):
        if not table:
            continue
        levels = sorted({lvl for cells in table.values() for lvl in cells}, key=int)
        lines += ["", f"## {title}", "", "| family | " + " | ".join(f"L{lvl}" for lvl in levels) + " |",
                  "|---" * (len(levels) + 1) + "|"]
        for family in sorted(table):
            cells = [table[family].get(lvl) for lvl in levels]
            lines.append(f"| {family} | " + " | ".join(
                f"{c['passed']}/{c['n']}" if c else "" for c in cells) + " |")
    if report.failure_modes:
        lines += ["", "## Failure modes", ""]
        lines += [f"- {m}: {n}" for m, n in sorted(report.failure_modes.items(), key=lambda kv: -kv[1])]
    h = report.habits
    if h.get("episodes"):
        after = (f"{h['done_after_error']} of {h['turns_after_error']} turns right after a failed command said DONE"
                 if h["turns_after_error"] else "no command failed")
        lines += ["", "## Habits (practice)", "",
                  f"- {h['commands_mean']:.1f} commands per episode; {h['only_looks']} of {h['episodes']} episodes "
                  "only looked (ls, cat, head, ...) and never acted", f"- {after}"]
    lines += render_regressions(report)
    lines += render_tool_health(report.tool_health)
    lines += render_learning_signal(report.learning_signal)
    if report.band:
        lines += ["", "## Learnable band", ""]
        lines += [f"- {f}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                  for f, c in sorted(report.band.items())]
    lines += render_curriculum(report)
    lines += ["", "## Weakest families", "", ", ".join(report.weak_families[:5]) or "n/a",
              "", "## The policy's own analysis", "", report.analysis, ""]
    return "\n".join(lines)


def render_regressions(report: CapabilityReport) -> list[str]:
    """The held-out cells that went down: regressions beyond noise, and how many drops were within it."""
    found, noise = report.regressions, report.regressions_within_noise
    if not found and not noise:
        return []

    def cell(r: dict[str, Any]) -> str:
        if "before_counts" not in r:  # reports saved before the noise rule carry the rates alone
            return f"{r['family']} L{r['difficulty']}: {r['before']:.0%} → {r['after']:.0%}"
        (bp, bn), (ap, an) = r["before_counts"], r["after_counts"]
        (blo, bhi), (alo, ahi) = r["before_interval"], r["after_interval"]
        return (f"{r['family']} L{r['difficulty']}: {bp}/{bn} [{blo:.0%}, {bhi:.0%}] → "
                f"{ap}/{an} [{alo:.0%}, {ahi:.0%}]")

    lines = ["", "## Regressions", "", f"Rule: {report.regression_rule or REGRESSION_RULE}.", ""]
    lines += [f"- {cell(r)}" for r in found] or ["- none beyond noise"]
    if noise:
        lines += ["", f"Within noise: {len(noise)} cell(s) went down by less than the intervals can tell: "
                  + "; ".join(cell(r) for r in noise)]
    return lines


def render_curriculum(report: CapabilityReport) -> list[str]:
    """The report's sections on held-out intervals, the controller's decisions, demonstrations and capability."""
    lines: list[str] = []
    ev = report.evaluation
    if ev and ev.get("n"):
        lines += ["", "## Held-out pass@1 with 95 % interval", "",
                  f"{ev['pass_at_1']:.1%} [{ev['low']:.1%}, {ev['high']:.1%}] over {ev['n']} rollouts "
                  f"({ev.get('tasks', '?')} tasks x k={ev.get('k', '?')})"]
        for level, c in sorted((ev.get("by_level") or {}).items()):
            lines.append(f"- L{level}: {c['passed']}/{c['n']} = {c['pass_at_1']:.0%} [{c['low']:.0%}, {c['high']:.0%}]")
    lines += render_devset(report)[1:]
    for x in report.extra_sets:  # evaluation.extra_sets: the user's task sets (issue 53), never trained on
        lines += ["", f"## Task set {x['name']}: pass@1 with 95 % interval (never trained on)", "",
                  f"{x['pass_at_1']:.1%} [{x['low']:.1%}, {x['high']:.1%}] ({x['passed']}/{x['n']}) over "
                  f"{x['tasks']} tasks x k={x['k']}" + (f"; {x['infra_errors']} infra error(s) left out"
                  if x["infra_errors"] else "") + (f"; {len(x['excluded'])} excluded at its validation"
                  if x["excluded"] else ""), "- trend: " + " → ".join(f"{t['pass_at_1']:.1%}" for t in x["trend"])]
    if report.decisions:
        lines += ["", "## Controller decisions", ""]
        lines += [f"- {f}: {d['reason']}" for f, d in sorted(report.decisions.items())]
    if report.self_proposal:
        lines += ["", "## Self-proposal (this iteration's yield)", "",
                  " -> ".join(f"{k} {v}" for k, v in report.self_proposal.items())]
    if report.demonstrations:
        lines += ["", "## Demonstrations", "",
                  ", ".join(f"{k} {v}" for k, v in sorted(report.demonstrations.items()))]
    cap = report.capability
    if cap:
        lines += ["", "## Capability by family and level (computed)", ""]
        for family in sorted(cap):
            for level, c in sorted(cap[family].items(), key=lambda kv: int(kv[0])):
                modes = ", ".join(f"{m} {n}" for m, n in sorted(c["failure_modes"].items(), key=lambda kv: -kv[1]))
                line = f"- {family} L{level}: {c['passed']}/{c['n']} passed"
                if modes:
                    line += f"; failures: {modes}"
                if c["wrong_commands"]:
                    line += "; typical wrong commands: " + ", ".join(f"`{cmd}` x{n}" for cmd, n in c["wrong_commands"])
                weak_ops = [f"{op} {o['passed']}/{o['n']}" for op, o in (c.get("operations") or {}).items()
                            if op != family and o["passed"] < o["n"]]
                if weak_ops:
                    line += "; operations not yet passing: " + ", ".join(weak_ops[:6])
                lines.append(line)
                if c.get("example"):
                    lines.append(f"  - e.g. \"{c['example']['task']}\" -> `{c['example']['ran']}`")
    return lines


# --- the transfer dev set: its own block, beside the held-out set's ------------------------------------
DEV_METRICS = ("dev_pass@1", "dev_low", "dev_high", "dev_tasks", "dev_k")


PROPOSAL_YIELD = ("asked", "parsed", "stored", "valid", "learnable", "trained")


def proposal_yield(store: Store, run_id: str, iteration: int, tasks: Iterable[Task],
                   rollouts: list[Rollout]) -> dict[str, int]:
    """Self-proposal's yield this iteration: proposals asked of the policy, parsed into a task, stored (new,
    not a duplicate), valid (passed validation), and of the valid ones learnable (a practice group with both
    outcomes: a GRPO signal) and trained (learnable, or solved at least once: an SFT sample under
    `both`/`sft`). Empty when self-proposal did not run this iteration."""
    asked = dict(store.metric_series(run_id, "propose_asked")).get(iteration)
    if asked is None:
        return {}
    parsed = dict(store.metric_series(run_id, "propose_parsed")).get(iteration, 0.0)
    mine = [t for t in tasks if t.source == "self_proposed" and t.iteration == iteration]
    solved = {r.task_id for r in rollouts if r.purpose == "train" and r.outcome == Outcome.SUCCESS}
    valid = [t for t in mine if t.status not in (TaskStatus.PROPOSED, TaskStatus.REJECTED)]
    learnable = [t for t in valid if t.status == TaskStatus.LEARNABLE]
    trained = [t for t in valid if t.status == TaskStatus.LEARNABLE or t.id in solved]
    return dict(zip(PROPOSAL_YIELD, (int(asked), int(parsed), len(mine), len(valid), len(learnable), len(trained)),
                    strict=True))


def devset_block(store: Store, run_id: str, iteration: int) -> dict[str, Any] | None:
    """The dev set's pass@1 with its 95 % interval at this iteration, per category, and its trend, as
    `evaluate.evaluate_devset` computed and stored them (dev_* metrics); None when it was not evaluated."""
    series = {name: dict(store.metric_series(run_id, name)) for name in DEV_METRICS}
    trend = [{"iteration": it, "pass_at_1": p, "low": series["dev_low"].get(it, 0.0),
              "high": series["dev_high"].get(it, 0.0)} for it, p in sorted(series["dev_pass@1"].items())]
    if iteration not in series["dev_pass@1"]:
        return None
    cats = sorted(n.removeprefix("dev_n.") for n in store.step_metric_names(run_id, iteration - 1, iteration)
                  if n.startswith("dev_n."))
    by_category = {}
    for cat in cats:
        c = {what: dict(store.metric_series(run_id, f"dev_{what}.{cat}")).get(iteration, 0.0)
             for what in ("n", "passed", "low", "high")}
        if c["n"]:
            by_category[cat] = {**c, "pass_at_1": c["passed"] / c["n"]}
    n = sum(c["n"] for c in by_category.values())
    return {"pass_at_1": series["dev_pass@1"][iteration], "low": series["dev_low"][iteration],
            "high": series["dev_high"][iteration], "n": int(n), "tasks": int(series["dev_tasks"].get(iteration, 0)),
            "k": int(series["dev_k"].get(iteration, 1)), "by_category": by_category, "trend": trend}


def render_devset(report: CapabilityReport) -> list[str]:
    """A headline line (first) and a section: the dev set's pass@1 with its interval, per category, trend."""
    dev = report.devset
    if not dev or not dev.get("n"):
        return []
    said = f"{dev['pass_at_1']:.1%} [{dev['low']:.1%}, {dev['high']:.1%}]"
    lines = [f"**Dev-set pass@1 (transfer, never trained on):** {said}  ",
             "", "## Dev-set pass@1 with 95 % interval (transfer)", "",
             f"{said} over {dev['n']} rollouts ({dev['tasks']} tasks x k={dev['k']})"]
    for cat, c in sorted(dev["by_category"].items()):
        lines.append(f"- {cat}: {int(c['passed'])}/{int(c['n'])} = {c['pass_at_1']:.0%} "
                     f"[{c['low']:.0%}, {c['high']:.0%}]")
    lines.append("- trend: " + " → ".join(f"{t['pass_at_1']:.1%}" for t in dev["trend"]))
    return lines

