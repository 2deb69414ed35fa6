"""Overview: the run, the current iteration's phase timeline (with a training phase's steps done, from the
live loop's heartbeat), engine, device load, learning curves, rollout counts and the latest events."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from appliance.learning_signal import summary_line
from appliance.lineage import served_short, start_label
from appliance.schemas import Event, Iteration, IterationStatus, Phase
from appliance.store import Store
from appliance.tui.base import Context, PollingScreen, plain, run_title

PHASES = [p for p in Phase if p != Phase.DONE]
SPARKS = "▁▂▃▄▅▆▇█"
CURVE_POINTS = 30
EVENT_KINDS = ("phase", "engine", "train", "error", "info", "control", "rollback")


@dataclass(frozen=True, slots=True)
class OverviewData:
    title: str
    run: Content
    timeline: Content
    system: Content
    rollouts: Content
    curves: Content
    events: Content


class OverviewScreen(PollingScreen):
    TITLE_TEXT = "overview"

    def compose(self) -> ComposeResult:
        yield from self.compose_title()
        with VerticalScroll(id="overview"):
            for name in ("run", "timeline", "system", "rollouts", "curves", "events"):
                yield Static("", id=f"ov-{name}", classes="line")
        yield from self.compose_footer()

    def load(self, ctx: Context) -> OverviewData:
        store, run = ctx.store, ctx.run
        state, version, _ = store.engine_state()
        model = served_short(store)
        engine = Content.assemble("engine ", (str(state).upper(), "bold"), " (",
                               plain(model) if model else f"policy v{version}", ")")
        system = Content.assemble(engine, " · ", plain(self.appliance.probe()))
        if run is None:
            return OverviewData(run_title(None, "overview"), Content(), Content(), system, Content(), Content(),
                                Content())
        iterations = store.iterations(run.id)
        it = iterations[-1] if iterations else None
        # no "of N": iteration 0 measures the policy the run started from (the base model, or the version a
        # continued run took over), and a restart may change the planned count
        start = Content.assemble(" (", plain(start_label(store, run.id)), ")") if it and it.index == 0 else Content()
        run_line = Content.assemble("iteration ", (str(it.index), "bold"), start,
                                 f" · policy v{it.policy_version}", rollback_note(store, run.id)) if it \
            else Content("no iteration yet")
        timeline = phase_timeline(it, store.phase_events(run.id, it.index), ctx.now,
                                  phase_durations(store, run.id, it.index)) + training_steps(store, run.id) \
            if it else Content()
        counts = store.rollout_counts(run.id, it.index) if it else {}
        return OverviewData(run_title(run, "overview"), run_line, timeline, system, rollout_line(counts),
                            curves(store, run.id, counts), events_text(store.latest_events(run.id, limit=7,
                                                                                           kinds=EVENT_KINDS)))

    def show(self, data: OverviewData) -> None:
        self.set_title(data.title)
        for name in ("run", "timeline", "system", "rollouts", "curves", "events"):
            self.query_one(f"#ov-{name}", Static).update(getattr(data, name))  # each widget shows its field


def phase_durations(store: Store, run_id: str, iteration: int) -> dict[str, float]:
    """How long each finished phase of the iteration took: the loop's `info` event at a phase's end carries
    data.iteration, data.phase and duration_s. Only the newest few are read (an iteration has six phases)."""
    found: dict[str, float] = {}
    for e in store.latest_events(run_id, limit=24, kinds=("info",)):  # newest first: a redone phase's last run
        if e.data.get("iteration") == iteration and e.data.get("phase") and e.duration_s is not None:
            found.setdefault(str(e.data["phase"]), e.duration_s)
    return found


def training_steps(store: Store, run_id: str) -> Content:
    """`  training step 3/8 · about 1m15s left` while the live loop's phase trains (its heartbeat's progress)."""
    from appliance.control import loop_alive

    beat = store.heartbeat()
    progress = beat.progress if beat is not None and loop_alive(store, run_id)[0] else None
    if not progress or not progress.get("steps_total"):
        return Content()
    left = f" · about {human_duration(progress['left_s'])} left" if progress.get("left_s") is not None else ""
    return Content.assemble("  training step ", (f"{progress['steps_done']}/{progress['steps_total']}", "bold"), left)


def phase_timeline(it: Iteration, events: list[Event], now: float, done: dict[str, float] | None = None) -> Content:
    """`synthesize 40s › validate 1m05s › [train 32s] › sync › ...`: done phases with their durations,
    the current one highlighted, the ones to come dimmed.

    The loop writes a `phase` event (data.iteration) when a phase starts and says how long it took when
    it ends (`done`, from `phase_durations`). Without that a phase lasts until the next one starts, or
    `duration_s` when the event carries it. (Seen on a real run: a loop paused between two phases kept
    the finished phase's clock running when only the starts were read.)
    """
    done = done or {}
    starts: dict[str, Event] = {}
    for e in events:
        starts.setdefault(e.message, e)
    ordered = sorted(starts.values(), key=lambda e: e.created_at)
    parts: list[Content] = []
    for phase in PHASES:
        start = starts.get(phase)
        current = phase == it.phase and it.status == IterationStatus.RUNNING
        if start is None:
            parts.append(Content.styled(f" {phase} ", "reverse") if current else Content.styled(phase, "dim"))
            continue
        later = [o.created_at for o in ordered if o.created_at > start.created_at]
        if start.duration_s is not None:
            duration = start.duration_s
        elif phase in done and not current:
            duration = done[phase]
        elif later:
            duration = later[0] - start.created_at
        elif current:
            duration = now - start.created_at
        else:
            duration = (it.finished_at or now) - start.created_at
        label = f"{phase} {human_duration(duration)}"
        parts.append(Content.styled(f" {label} ", "reverse") if current else Content(label))
    line = Content(" › ").join(parts)
    if it.status != IterationStatus.RUNNING:
        line += Content.assemble(f"  ({it.status}", ": " if it.error else "", plain(it.error or ""), ")")
    return line


def rollout_line(counts: dict[str, int]) -> Content:
    outcomes = " ".join(f"{name} {counts.get(key, 0)}" for key, name in
                        (("success", "ok"), ("failure", "fail"), ("truncated", "trunc"), ("infra_error", "infra")))
    return Content.assemble("rollouts  running ", (str(counts.get("running", 0)), "bold"),
                         f" · pending {counts.get('pending', 0)} · done ", (str(counts.get("finished", 0)), "bold"),
                         f" ({outcomes})")


def curves(store: Store, run_id: str, counts: dict[str, int]) -> Content:
    heldout = [v for _, v in store.heldout_curve(run_id)] or \
        [v for _, v in store.metric_tail(run_id, "heldout_pass@1", CURVE_POINTS)]
    reward = [v for _, v in store.metric_tail(run_id, "reward_mean", CURVE_POINTS)]
    infra = [v for _, v in store.metric_tail(run_id, "infra_error_rate", CURVE_POINTS)]
    if not infra and counts.get("finished"):
        infra = [counts.get("infra_error", 0) / counts["finished"]]
    from appliance.evaluate import learning_curve

    measured = learning_curve(store, run_id)
    interval = f" [{measured[-1][1].low:.2f}-{measured[-1][1].high:.2f}] n={measured[-1][1].n}" if measured else ""
    return Content("\n").join([
        curve_line("held-out pass@1", heldout, "{:.2f}") + interval,
        curve_line("reward mean", reward, "{:.2f}"),
        curve_line("loss", [v for _, v in store.metric_tail(run_id, "loss", CURVE_POINTS)], "{:.3f}"),
        curve_line("infra-error rate", infra, "{:.1%}"),
        learning_line(store, run_id),
        *signal_lines(store, run_id),
    ])


def learning_line(store: Store, run_id: str) -> Content:
    """The last GRPO step's signal and trust-region numbers (issue 15's per-step metrics)."""
    last = {name: store.metric_tail(run_id, name, 1) for name in
            ("groups_with_signal", "valid_groups", "clip_ratio", "logprob_gap_mean", "entropy", "truncated_tokens",
             "turns_mean", "response_tokens_mean")}
    if not last["groups_with_signal"]:
        return Content.assemble(f"{'last step':<17}", ("no data yet", "dim"))
    v = {name: (tail[-1][1] if tail else 0.0) for name, tail in last.items()}
    return Content.assemble(
        f"{'last step':<17}signal ", (f"{v['groups_with_signal']:.0f}", "bold"), f"/{v['valid_groups']:.0f} groups · "
        f"clip {v['clip_ratio']:.2f} · IS gap {v['logprob_gap_mean']:.3f} · entropy {v['entropy']:.2f} · "
        f"cut {v['truncated_tokens']:.0f} tok · {v['turns_mean']:.1f} turns · "
        f"{v['response_tokens_mean']:.0f} tok/reply")


SIGNAL_ITERATIONS = 3  # the newest reports' learning signal on the overview (the warm-start's while it is recent)


def signal_lines(store: Store, run_id: str) -> list[Content]:
    """The learning signal of the newest few iterations' reports (issue 54): groups with signal of all groups,
    tokens the RL step trained of those sampled, SFT's tokens, entropy; none for reports without the block."""
    lines: list[Content] = []
    for it in store.report_iterations(run_id)[-SIGNAL_ITERATIONS:]:
        found = store.report(run_id, it)
        said = summary_line(found[0].learning_signal) if found else None
        if said:
            label = "learning signal" if not lines else ""
            lines.append(Content.assemble(f"{label:<17}", plain(said)))
    return lines


def curve_line(label: str, values: list[float], fmt: str) -> Content:
    if not values:
        return Content.assemble(f"{label:<17}", ("no data yet", "dim"))
    return Content.assemble(f"{label:<17}{sparkline(values[-CURVE_POINTS:]):<{CURVE_POINTS}} ",
                         (fmt.format(values[-1]), "bold"))


def sparkline(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return SPARKS[len(SPARKS) // 2] * len(values)
    return "".join(SPARKS[round((v - lo) / (hi - lo) * (len(SPARKS) - 1))] for v in values)


def rollback_note(store: Store, run_id: str) -> Content:
    """` · 2 syncs refused (...)` in red when the engine refused trained weights (phases/train.py)."""
    refused = store.latest_events(run_id, limit=100, kinds=("rollback",))
    if not refused:
        return Content()
    n = len(refused)
    return Content.assemble(" · ", (f"{n}{'+' if n == 100 else ''} sync{'s' if n > 1 else ''} refused", "bold red"),
                            (f" (last: iteration {refused[0].data.get('iteration')}; training goes on from the "
                             "refused weights, the previous policy serves)", "red"))


def events_text(events: list[Event]) -> Content:
    lines = [Content.styled("latest events", "bold")]
    for e in events:
        took = f" ({human_duration(e.duration_s)})" if e.duration_s is not None else ""
        line = Content.assemble(f"{e.kind:<7} ", plain(e.message), took)
        lines.append(line.stylize("red") if e.kind in ("error", "rollback") else line)
    return Content("\n").join(lines)


def human_duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
