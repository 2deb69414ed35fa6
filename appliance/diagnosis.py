"""The capability report: what the agent can and cannot do after an iteration, from the store alone.

JSON drives the next round (weak families, difficulty moves); Markdown is for people. The short analysis
is written by the policy itself through a `generate_text` callable (no external model); without one the
report says so instead of inventing text.

Failure modes come from the rollout's outcome and the reason recorded with it (`rollouts.error` is
"<mode>: detail", e.g. "turn_limit: 8 turns", "infra: sandbox died").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from appliance.lineage import describe_version, start_label
from appliance.schemas import Outcome, Rollout, TaskStatus
from appliance.store import Store

FAILURE_MODES = ("wrong_answer", "format_error", "turn_limit", "token_limit", "timeout", "context_overflow")


def failure_mode(rollout: Rollout) -> str | None:
    """The failure mode of a finished rollout; None for a success."""
    if rollout.outcome == Outcome.SUCCESS:
        return None
    reason = (rollout.error or "").split(":", 1)[0].strip()
    if rollout.outcome == Outcome.INFRA_ERROR:
        cause = (rollout.error or "unknown").split(":", 1)
        return "infra:" + (cause[1].strip().split()[0] if len(cause) > 1 and cause[1].strip() else cause[0] or "unknown")
    if reason in FAILURE_MODES:
        return reason
    return "turn_limit" if rollout.outcome == Outcome.TRUNCATED else "wrong_answer"


def _cells(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for r in rows:
        n, p = r["n"], r["passed"]
        out[r["family"]][str(r["difficulty"])] = {"n": n, "passed": p, "pass_rate": p / n if n else 0.0}
    return dict(out)


def build_report(store: Store, run_id: str, iteration: int,
                 generate_text: Callable[[str], str] | None = None) -> tuple[dict[str, Any], str]:
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
    modes: Counter[str] = Counter()
    for r in train_rollouts:
        mode = failure_mode(r)
        if mode:
            modes[mode] += 1
        task = tasks.get(r.task_id or "")
        if task and r.purpose in ("train", "validate") and r.outcome != Outcome.INFRA_ERROR:
            cell = train_cells[(task.family, task.difficulty)]
            cell[0] += 1
            cell[1] += r.outcome == Outcome.SUCCESS
    train = _cells([{"family": f, "difficulty": d, "n": n, "passed": p} for (f, d), (n, p) in train_cells.items()])
    heldout = _cells(current)

    band: dict[str, Counter[str]] = defaultdict(Counter)
    for t in tasks.values():
        if t.split == "train" and t.status in (TaskStatus.LEARNABLE, TaskStatus.TOO_EASY, TaskStatus.TOO_HARD):
            band[t.family][str(t.status)] += 1

    regressions = []
    previous = {(r["family"], r["difficulty"]): r for r in by_iter.get(iteration - 1, [])}
    for r in current:
        prev = previous.get((r["family"], r["difficulty"]))
        if prev and prev["n"] and r["n"] and r["passed"] / r["n"] < prev["passed"] / prev["n"]:
            regressions.append({"family": r["family"], "difficulty": r["difficulty"],
                                "before": prev["passed"] / prev["n"], "after": r["passed"] / r["n"]})

    family_rates = {}
    for family, levels in {**train, **heldout}.items():
        n = sum(c["n"] for c in levels.values())
        family_rates[family] = sum(c["passed"] for c in levels.values()) / n if n else 0.0
    weak = sorted(family_rates, key=lambda f: family_rates[f])
    valid = [r for r in train_rollouts if r.outcome != Outcome.INFRA_ERROR]
    report: dict[str, Any] = {
        "run_id": run_id,
        "iteration": iteration,
        "policy_version": current[0]["policy_version"] if current else None,
        "heldout_pass_at_1": trend[-1]["pass_at_1"] if trend and trend[-1]["iteration"] == iteration else None,
        "heldout": heldout,
        "train": train,
        "trend": trend,
        "failure_modes": dict(modes),
        "infra_error_rate": (len(train_rollouts) - len(valid)) / len(train_rollouts) if train_rollouts else 0.0,
        "rollouts": len(train_rollouts),
        "regressions": regressions,
        "band": {f: dict(c) for f, c in band.items()},
        "family_pass_rate": family_rates,
        "weak_families": weak,
    }
    report["model"] = _model(store, run_id, report["policy_version"])
    report["analysis"] = _analysis(report, generate_text)
    return report, render_markdown(report)


def _model(store: Store, run_id: str, version: int | None) -> dict[str, Any]:
    """Which model the report is about: the base of the run's lineage and the version evaluated."""
    lineage_id = store.run_lineage(run_id)
    lineage = store.get_lineage(lineage_id) if lineage_id is not None else None
    return {"base": lineage["base_name"] if lineage else None, "lineage": lineage_id,
            "base_hash": lineage["content_hash"][:12] if lineage else None,
            "policy_version": version, "start": start_label(store, run_id),
            "describe": describe_version(store, version, lineage_id) if version is not None else "not evaluated"}


def _analysis(report: dict[str, Any], generate_text: Callable[[str], str] | None) -> str:
    if generate_text is None:
        return "(no analysis: the policy was not available to write one)"
    summary = ", ".join(f"{f} {r:.0%}" for f, r in report["family_pass_rate"].items()) or "no tasks yet"
    modes = ", ".join(f"{m} {n}" for m, n in report["failure_modes"].items()) or "none"
    prompt = (f"You are an agent reviewing your own practice results.\nPass rate per task family: {summary}.\n"
              f"Failure counts: {modes}.\nIn two sentences, say what you are weakest at and what to practise next.")
    try:
        return generate_text(prompt).strip()[:1500] or "(the policy wrote nothing)"
    except Exception as e:  # the report must not fail because the engine is busy
        return f"(no analysis: {e})"


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Capability report — iteration {report['iteration']}", ""]
    model = report.get("model")
    if model:  # reports saved before lineages were recorded have no model block
        base = f"{model['base']} (lineage {model['lineage']}, {model['base_hash']})" if model["base"] else "not recorded"
        lines += [f"**Model:** {model['describe']} · base {base} · the run started from {model['start']}  "]
    p = report["heldout_pass_at_1"]
    lines.append(f"**Held-out pass@1:** {'n/a' if p is None else f'{p:.1%}'}  ")
    lines.append("**Trend:** " + (" → ".join(f"{t['pass_at_1']:.1%}" for t in report["trend"]) or "n/a") + "  ")
    lines.append(f"**Infra-error rate:** {report['infra_error_rate']:.1%} of {report['rollouts']} rollouts")
    for title, key in (("Held-out pass@1 by family × difficulty", "heldout"), ("Practice pass rate", "train")):
        table = report[key]
        if not table:
            continue
        levels = sorted({lvl for cells in table.values() for lvl in cells}, key=int)
        lines += ["", f"## {title}", "", "| family | " + " | ".join(f"L{lvl}" for lvl in levels) + " |",
                  "|---" * (len(levels) + 1) + "|"]
        for family in sorted(table):
            cells = [table[family].get(lvl) for lvl in levels]
            lines.append(f"| {family} | " + " | ".join(
                f"{c['passed']}/{c['n']}" if c else "" for c in cells) + " |")
    if report["failure_modes"]:
        lines += ["", "## Failure modes", ""]
        lines += [f"- {m}: {n}" for m, n in sorted(report["failure_modes"].items(), key=lambda kv: -kv[1])]
    if report["regressions"]:
        lines += ["", "## Regressions", ""]
        lines += [f"- {r['family']} L{r['difficulty']}: {r['before']:.0%} → {r['after']:.0%}" for r in report["regressions"]]
    if report["band"]:
        lines += ["", "## Learnable band", ""]
        lines += [f"- {f}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) for f, c in sorted(report["band"].items())]
    lines += ["", "## Weakest families", "", ", ".join(report["weak_families"][:5]) or "n/a",
              "", "## The policy's own analysis", "", report["analysis"], ""]
    return "\n".join(lines)
