"""The learning benchmark: `appliance run` on the cpu profile for a fixed wall-clock budget, from the base
model, then the held-out pass@1 curve with 95 % Wilson intervals beside the transfer dev set's curve
(appliance/tasks/devset: never trained on, for choosing recipes), the level each family reached, and the
demonstration / replay / self-proposal counts.

Usage: scripts/bench learning [--minutes 120] [--grace 30] [--seed 0] [--method grpo|ppo] [--home DIR]
                              [--no-deadline] [--set KEY=VALUE ...] [--arms default,rl-off,sft-off]
       scripts/bench learning --report-only --home DIR [--arms ...]  (print the curve of a finished or running run)

With --arms (issue 54), the same run once per ablation arm, one after the other, each in its own home
(DIR/ARM), same seed and same budget: `default` (the cpu profile's loop), `rl-off` (training.method = sft: no
GRPO step; SFT on successes and demonstrations as in the default) and `sft-off` (training.sft_on_successes =
false: no SFT on the policy's own successes, neither the iteration's nor the pool's; RL and the reference
demonstrations stay). It ends with one table: per arm and iteration, held-out pass@1 and the dev set's with
their 95 % intervals, and the learning signal (practice groups with signal of all groups, tokens the RL step
trained of those sampled, SFT's tokens, entropy). The whole ablation on the 2-core machine:
`scripts/bench learning --arms default,rl-off,sft-off --minutes 120 --seed 0 --home /work/runs/arms-s0`
(three 2-hour runs back to back); a second seed for the issue's bar is the same with --seed 1.

Each call with a fresh --home (the default: a new tmp dir) starts from the base model. The dev set is
evaluated whole at every iteration (evaluation.devset_min_tasks raised; --set can lower it). It needs the bundled
model and the sandbox image of the default data directory (read-only: the model folder is passed as
engine.model and the image store is shared). The run is told the budget (`appliance run --minutes`), so its
last iteration practises only as long as still leaves time to train on it. At the budget the run is stopped,
except that an evaluation of a trained policy already under way is let finish (up to --grace minutes; the
overrun is printed): training ends at the budget, its measurement need not. The warm-start alone is not evaluated
(evaluation.after_warmstart off; `--set evaluation.after_warmstart=true` measures it). Run it under
`flock /tmp/appliance-heavy.lock` on a shared machine. Issue 16's bar: over two seeds, pass@1 on the
template-held-out levels 2-4 rises by >= 20 points with non-overlapping intervals between the first and the
last evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.agent_habits import habits  # noqa: E402
from appliance.config import load_settings  # noqa: E402
from appliance.evaluate import devset_curve, learning_curve  # noqa: E402
from appliance.store import Store  # noqa: E402

# the ablation arms: each switches one learner off (APPLIANCE_ settings of the run); same seed, same budget
ARMS: dict[str, dict[str, str]] = {
    "default": {},
    "rl-off": {"APPLIANCE_TRAINING__METHOD": "sft"},  # no GRPO step; SFT on successes and demonstrations
    "sft-off": {"APPLIANCE_TRAINING__SFT_ON_SUCCESSES": "false"},  # RL and reference demonstrations only
}
APPLIANCE = [str(REPO / ".venv/bin/appliance")]  # the command a run starts (tests put a scripted double here)
POLL_S = 5.0


def arm_names(text: str) -> list[str]:
    names = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in names if a not in ARMS]
    if unknown or not names:
        raise SystemExit(f"unknown arm(s) {unknown or text!r}: choose from {', '.join(ARMS)}")
    return names


def signal_of(store: Store, run_id: str, iteration: int, group_size: int) -> dict | None:
    """The iteration's learning signal: its report's block, else computed from the store (an older build's run)."""
    from appliance.learning_signal import learning_signal

    found = store.report(run_id, iteration)
    if found is not None and found[0].learning_signal:
        return found[0].learning_signal
    return learning_signal(store, run_id, iteration, group_size).as_dict() if iteration > 0 else None


def arms_table(homes: dict[str, Path], group_size: int = 4) -> list[str]:
    """One table over the arms' runs: per arm and iteration, held-out and dev-set pass@1 with their 95 %
    intervals, and the learning signal of that iteration."""
    from appliance.learning_signal import LearningSignal

    def interval(p) -> str:
        return f"{p.pass_at_1:6.1%} [{p.low:5.1%}, {p.high:5.1%}]" if p else f"{'-':>23}"

    lines = [f"{'arm':<8} {'it':>2}  {'held-out pass@1 [95 %]':<23}  {'dev-set pass@1 [95 %]':<23}  "
             f"{'signal/groups':>13}  {'RL tok trained/sampled':>22}  {'SFT tok':>8}  {'entropy':>7}"]
    for arm, home in homes.items():
        if not (home / "appliance.db").exists():
            lines.append(f"{arm:<8} (no run in {home})")
            continue
        store = Store(home / "appliance.db", migrate=False)
        try:
            run = store.latest_run()
            if run is None:
                lines.append(f"{arm:<8} (no run in {home})")
                continue
            held, dev = dict(learning_curve(store, run.id)), dict(devset_curve(store, run.id))
            for it in sorted({i.index for i in store.iterations(run.id)} | set(held)):
                block = signal_of(store, run.id, it, group_size)
                s = LearningSignal.of(block) if block else None
                groups = f"{s.signal_groups}/{s.groups}" if s and s.groups else "-"
                rl = f"{s.rl_trained_tokens}/{s.sampled_tokens}" if s and (s.sampled_tokens or s.rl_steps) else "-"
                sft = (f"{s.sft_tokens}{'w' if s.warmstart else ''}" if s and s.sft_steps else "-")
                entropy = f"{s.entropy:.3f}" if s and s.entropy is not None else "-"
                lines.append(f"{arm:<8} {it:>2}  {interval(held.get(it)):<23}  {interval(dev.get(it)):<23}  "
                             f"{groups:>13}  {rl:>22}  {sft:>8}  {entropy:>7}")
        finally:
            store.close()
    lines.append("(SFT tok: w = the warm-start's; entropy: the trainer's per token over the RL step's samples)")
    return lines


def report(home: Path) -> int:
    store = Store(home / "appliance.db")
    run = store.latest_run()
    if run is None:
        print(f"no run in {home}")
        return 1
    curve = learning_curve(store, run.id)
    print(f"run {run.id} ({run.status})")
    print("iteration  pass@1   95 % interval     passed/n   by level")
    for it, p in curve:
        levels = "  ".join(f"L{lvl} {c['passed']}/{c['n']}" for lvl, c in p.by_level.items())
        print(f"{it:>9}  {p.pass_at_1:6.1%}  [{p.low:5.1%}, {p.high:5.1%}]  {p.passed:>5}/{p.n:<5}  {levels}")
    if len(curve) >= 2:
        first, last = curve[0][1], curve[-1][1]
        separated = last.low > first.high
        print(f"change {100 * (last.pass_at_1 - first.pass_at_1):+.1f} points; intervals "
              f"{'do not overlap' if separated else 'overlap'}")
        paired(store, run.id, curve[0][0], curve[-1][0])
    beside(curve, devset_curve(store, run.id))  # whatever the held-out curve's length
    latest = store.report(run.id)
    if latest:
        rep = latest[0]
        print("levels:", json.dumps(rep.levels), "mastered:", json.dumps(rep.mastered))
        print("demonstrations:", json.dumps(rep.demonstrations), "self-proposal:", json.dumps(rep.self_proposal))
    for it in sorted({i.index for i in store.iterations(run.id)}):
        h = habits(store, store.rollouts(run.id, iteration=it, purpose="train"))
        if h["episodes"]:
            print(f"habits in iteration {it}'s practice: {h['commands_mean']:.2f} commands per episode, "
                  f"{h['only_looks']}/{h['episodes']} episodes only looked, "
                  f"DONE right after a failed command {h['done_after_error']}/{h['turns_after_error']}")
    learning(store, run.id)
    replays = sum((t.spec.get("meta") or {}).get("round") == "replay" for t in store.tasks(run.id))
    print(f"replayed tasks: {replays}")
    store.close()
    return 0


def learning(store: Store, run_id: str, group_size: int = 4) -> None:
    """Each trained iteration's learning signal, and per family and level its groups: with signal, all passed,
    all failed (where practice gave the RL step something to learn from, and where it was too easy or hard)."""
    from appliance.learning_signal import LearningSignal, summary_line

    for it in sorted({i.index for i in store.iterations(run_id)} - {0}):
        block = signal_of(store, run_id, it, group_size)
        if not block:
            continue
        s = LearningSignal.of(block)
        nll = "" if s.sampled_nll is None else f" · sampled -logp {s.sampled_nll:.3f}"
        print(f"learning signal {summary_line(block)}{nll}; {s.all_passed} groups all passed, "
              f"{s.all_failed} all failed, {s.first_draw_signal} with signal at the first draw")
        for family, levels in sorted(s.cells.items()):
            cells = "  ".join(f"L{lvl} {c[0]}/{c[1]}" + (f" (+{c[2]} -{c[3]})" if len(c) > 3 else "")
                              for lvl, c in sorted(levels.items()))
            print(f"    {family:<14} {cells}")


def iterations_of(home: Path) -> list:
    """The iterations of the newest run in `home` (none before its store exists)."""
    if not (home / "appliance.db").exists():
        return []
    store = Store(home / "appliance.db", migrate=False)
    try:
        run = store.latest_run()
        return store.iterations(run.id) if run else []
    finally:
        store.close()


def evaluating_trained_policy(home: Path) -> bool:
    """Whether the run's newest iteration (not the base model's baseline) is evaluating or diagnosing."""
    from appliance.schemas import Phase

    its = iterations_of(home)
    return bool(its) and its[-1].index > 0 and its[-1].phase in (Phase.EVALUATE, Phase.DIAGNOSE)


def run_env(home: Path, model: Path, seed: int, sets: list[str], **settings: str) -> dict[str, str]:
    """The environment of an `appliance run` of this checkout in `home` on the cpu profile, from `model`, with
    the whole dev set at every evaluation, then `settings` (APPLIANCE_ names) and the --set KEY=VALUE pairs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env.update({
        "PYTHONPATH": str(REPO),  # this checkout's code, also under an editable install elsewhere
        "APPLIANCE_HOME": str(home), "APPLIANCE_PROFILE": "cpu", "APPLIANCE_ENGINE__MODEL": str(model),
        "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps([str(load_settings().podman_graphroot)]),
        "APPLIANCE_TRAINING__SEED": str(seed),
        # the whole dev set at every evaluation: the bench compares its first and last pass@1 by their
        # intervals, which the evaluation budget's 10-task minimum would leave too wide to separate
        "APPLIANCE_EVALUATION__DEVSET_MIN_TASKS": "1000",
        **settings,
    })
    for kv in sets:
        key, _, value = kv.partition("=")
        env["APPLIANCE_" + key.upper().replace(".", "__")] = value
    return env


def beside(heldout: list, dev: list) -> None:
    """The template-held-out curve and the transfer dev set's, side by side, each with its 95 % interval."""
    if not dev:
        print("dev set: not evaluated (evaluation.devset off, or no evaluation yet)")
        return
    held = dict(heldout)
    print("iteration  held-out pass@1 [95 %]      dev-set pass@1 [95 %]        dev passed/n  by category")
    for it, d in dev:
        h = held.get(it)
        left = f"{h.pass_at_1:6.1%} [{h.low:5.1%}, {h.high:5.1%}]" if h else f"{'-':>24}"
        cats = "  ".join(f"{c} {int(v['passed'])}/{int(v['n'])}" for c, v in d.by_level.items())
        print(f"{it:>9}  {left}    {d.pass_at_1:6.1%} [{d.low:5.1%}, {d.high:5.1%}]    {d.passed:>5}/{d.n:<5}  "
              f"{cats}  ({d.tasks} tasks x k={d.k})")


def paired(store: Store, run_id: str, first: int, last: int) -> None:
    """Both evaluations over the same tasks: a later evaluation inside its time budget runs a prefix of
    the held-out list, so its pass@1 and the baseline's are over different tasks unless restricted."""
    from appliance.schemas import Outcome, Split
    from appliance.tasks.difficulty import wilson

    held = {t.id for t in store.tasks(run_id, split=Split.HELDOUT)}  # eval rollouts of dev tasks are not these

    def results(iteration: int) -> dict[str, list[bool]]:
        out: dict[str, list[bool]] = {}
        for r in store.rollouts(run_id, iteration=iteration, purpose="eval"):
            if r.outcome not in (None, Outcome.INFRA_ERROR) and r.task_id in held:
                out.setdefault(r.task_id, []).append(r.outcome == Outcome.SUCCESS)
        return out

    before, after = results(first), results(last)
    common = sorted(set(before) & set(after))
    if not common or len(common) == len(before) == len(after):
        return
    for label, res in ((f"iteration {first}", before), (f"iteration {last}", after)):
        outcomes = [o for t in common for o in res[t]]
        low, high = wilson(sum(outcomes), len(outcomes))
        print(f"  on the {len(common)} tasks both evaluated, {label}: {sum(outcomes)}/{len(outcomes)} "
              f"= {sum(outcomes) / len(outcomes):.1%} [{low:.1%}, {high:.1%}]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=120.0, help="wall-clock budget of the run (of each arm's)")
    ap.add_argument("--seed", type=int, default=0, help="training.seed")
    ap.add_argument("--no-deadline", action="store_true",
                    help="do not tell the run its budget (`appliance run --minutes`): it is only stopped at the "
                         "budget, as before 2026-12-06, and its last practice goes untrained")
    ap.add_argument("--method", choices=["grpo", "ppo", "both", "sft"], default=None,
                    help="training.method (default: the cpu profile's; the rl-off arm always trains sft)")
    ap.add_argument("--grace", type=float, default=30.0,
                    help="minutes past the budget that an evaluation of a trained policy, started inside the "
                         "budget, may take to finish (0: stop at the budget)")
    ap.add_argument("--home", type=Path, default=None,
                    help="APPLIANCE_HOME of the run (default: a new tmp dir); with --arms, the folder of the "
                         "arms' homes")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra APPLIANCE_* setting, e.g. loop.tasks_per_family=4 (every arm's)")
    ap.add_argument("--arms", default=None, metavar="ARM,...",
                    help=f"run once per ablation arm ({', '.join(ARMS)}), same seed and budget, and print one table")
    ap.add_argument("--report-only", action="store_true", help="only print the curve of the run in --home")
    args = ap.parse_args(argv)
    arms = arm_names(args.arms) if args.arms is not None else None
    if args.report_only:
        if args.home is None:
            ap.error("--report-only needs --home")
        if arms:
            print("\n".join(arms_table({a: args.home / a for a in arms})))
            return 0
        return report(args.home)
    if arms is None:
        home = args.home or Path(tempfile.mkdtemp(prefix="appliance-bench-learning-"))
        return run_once(home, args, {}, fresh=args.home is None)
    base = args.home or Path(tempfile.mkdtemp(prefix="appliance-bench-learning-arms-"))
    homes = {a: base / a for a in arms}
    for arm, home in homes.items():
        print(f"--- arm {arm}: {', '.join(f'{k}={v}' for k, v in ARMS[arm].items()) or 'the default loop'}",
              flush=True)
        run_once(home, args, ARMS[arm], fresh=False)
    print("\n".join(arms_table(homes)))
    return 0


def run_once(home: Path, args: argparse.Namespace, arm: dict[str, str], *, fresh: bool) -> int:
    """One `appliance run` in `home` for the budget (the arm's settings over the bench's), then its report."""
    home.mkdir(parents=True, exist_ok=True)
    method = {"APPLIANCE_TRAINING__METHOD": args.method} if args.method else {}
    env = run_env(home, load_settings().model_path, args.seed, args.set, **{**method, **arm},
                  APPLIANCE_LOOP__ITERATIONS="1000",  # the budget, not the count, ends the run
                  # the warm-start alone is not what the bench measures, and its evaluation (10 of 120
                  # minutes on the cpu profile) left the third iteration's training cut by the budget
                  APPLIANCE_EVALUATION__AFTER_WARMSTART="false")
    print(f"appliance run in {home} for {args.minutes:g} min (seed {args.seed})", flush=True)
    log = open(home.parent / f"{home.name}.log", "w") if fresh else open(home / "bench.log", "a")
    # the run knows the budget (loop.deadline), so its last iteration practises less and still trains
    knows = [] if args.no_deadline else ["--minutes", f"{args.minutes:g}"]
    proc = subprocess.Popen([*APPLIANCE, "run", "--headless", *knows], env=env, cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + args.minutes * 60
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if proc.poll() is None and evaluating_trained_policy(home):
            # Training stops at the budget; measuring the policy it trained is not training, so an evaluation
            # already under way is let finish (at most --grace minutes) and the overrun is printed.
            print("the budget is spent while a trained policy is evaluated: letting that evaluation finish",
                  flush=True)
            grace_end = time.monotonic() + args.grace * 60
            while proc.poll() is None and time.monotonic() < grace_end and evaluating_trained_policy(home):
                time.sleep(POLL_S)
            print(f"stopped {(time.monotonic() - deadline) / 60:.1f} min past the budget", flush=True)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # `appliance run` stops cleanly on SIGTERM
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    print(f"log: {log.name}")
    return report(home)


if __name__ == "__main__":
    sys.exit(main())
