"""The trajectory viewer: every model call of one rollout, its tokens coloured by where they came from.

Per call: the history it shares with an earlier call is folded away; the tokens that are new in its
prompt (the task on the first call, tool results and harness text afterwards) are shown apart from
the tokens the engine sampled (the only ones training learns from). Where a prompt does not extend the
branch before it (the harness rewrote its history: compaction, sub-agent, retry) a branch point is marked.
The placement is the prefix tree the trainer's samples come from (`trajectories.build_tree`), not a second
reading of the calls; a failed call is not in that tree and is listed as such.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from appliance.errors import TrajectoryError
from appliance.schemas import ModelCall
from appliance.trajectories import build_tree
from appliance.tui.base import plain

if TYPE_CHECKING:
    from appliance.tui.app import ApplianceApp

Decoder = Callable[[list[int]], list[str]]  # token ids -> one display string per token
MAX_TOKENS_SHOWN = 1500
LEGEND = Content.assemble(("legend", "bold"), " ", ("prompt", "dim"), " ", ("tool / harness", "yellow"), " ",
                       ("sampled", "reverse green"), " ", ("⑂ branch", "magenta"), " ",
                       ("side call: sampled, not trained", "green"))


@dataclass(frozen=True, slots=True)
class CallView:
    seq: int
    parent: int | None  # seq of the earlier call whose sequence this prompt continues (or leaves)
    shared: int  # prompt tokens shared with that call
    branch: bool  # True when the prompt leaves the parent's sequence before its end (a new branch)
    new_prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    logprobs: tuple[float, ...]
    latency_s: float
    error: str | None
    in_tree: bool = True  # False: a failed call, which the tree (and so training) leaves out
    side: bool = False  # a harness's side call (title, summary, compaction): its own branch, never trained


def call_views(calls: list[ModelCall]) -> list[CallView]:
    """Each call as `trajectories.build_tree` places it, in seq order. A call that extends its branch
    continues the call that last extended it; the first call of a new branch leaves the branch it forked
    from, at the fork, after the last call that extended that branch before it. Raises TrajectoryError
    when the calls do not fit together (the trainer refuses them for the same reason)."""
    by_seq = {c.seq: c for c in calls}
    tree = build_tree(calls)
    placed: dict[int, tuple[int | None, int, bool, int]] = {}  # seq -> parent, shared, branch, prompt start
    side = {seg.call_seq for b in tree.branches if b.side for seg in b.segments}
    for b in tree.branches:
        for i, seg in enumerate(b.segments):
            if i > 0:
                placed[seg.call_seq] = (b.segments[i - 1].call_seq, seg.start, False, seg.start)
            elif b.parent is None:
                placed[seg.call_seq] = (None, 0, False, 0)
            else:
                before = [s.call_seq for s in tree.branches[b.parent].segments if s.call_seq < seg.call_seq]
                placed[seg.call_seq] = (before[-1], b.fork, True, b.fork)
    views = []
    for seq in sorted(by_seq):
        call = by_seq[seq]
        parent, shared, branch, start = placed.get(seq, (None, 0, False, len(call.prompt_ids)))
        views.append(CallView(seq, parent, shared, branch, tuple(call.prompt_ids[start:]),
                              tuple(call.completion_ids), tuple(call.logprobs), call.latency_s, call.error,
                              in_tree=seq in placed, side=seq in side))
    return views


def render(views: list[CallView], decode: Decoder | None) -> Content:
    """The calls as text; what the tokens decode to (the agent's commands, its observations) is plain."""
    out = [LEGEND]
    for v in views:
        mean = sum(v.logprobs) / len(v.logprobs) if v.logprobs else None
        head = (f"── call {v.seq} · {len(v.new_prompt)} new prompt + {len(v.sampled)} sampled tokens · "
                f"{v.latency_s:.2f} s")
        if mean is not None:
            head += f" · mean logprob {mean:.2f}"
        out += [Content(), Content.styled(head, "bold")]
        if v.error:
            out.append(plain(f"error: {v.error}", "red"))
        if not v.in_tree:
            out.append(Content.styled("not in the prefix tree: a failed call, nothing of it is trained", "dim"))
        if v.side:
            out.append(Content.styled("a side call of the harness (title, summary, compaction): its own branch, "
                                      "recorded, not trained", "green"))
        if v.branch and v.side:
            out.append(Content.styled(f"⑂ side branch: starts from call {v.parent}'s sequence after {v.shared} "
                                      "tokens (no history rewritten)", "magenta"))
        elif v.branch:
            out.append(Content.styled(f"⑂ branch: leaves call {v.parent}'s sequence after {v.shared} tokens"
                                      " (history rewritten)", "magenta"))
        if v.shared:
            out.append(Content.styled(f"… {v.shared} tokens shared with call {v.parent} …", "dim"))
        style = "dim" if v.parent is None else "yellow"
        out.append(tokens_text(v.new_prompt, decode, style)
                   + tokens_text(v.sampled, decode, "green" if v.side else "reverse green"))
    return Content("\n").join(out)


def tokens_text(ids: tuple[int, ...], decode: Decoder | None, style: str) -> Content:
    if not ids:
        return Content()
    shown = list(ids[:MAX_TOKENS_SHOWN])
    pieces = decode(shown) if decode else [f"{i} " for i in shown]
    text = plain("".join(pieces), style)
    if len(ids) > len(shown):
        text += Content.styled(f" … {len(ids) - len(shown)} more", "dim")
    return text


def tokenizer_decoder(model_path: Path) -> Decoder | None:
    """Per-token text from the model's tokenizer; None (ids are shown) when the folder has none."""
    if not (model_path / "tokenizer_config.json").exists() and not (model_path / "tokenizer.json").exists():
        return None
    try:
        from transformers import AutoTokenizer  # lazily: seconds to import, only when a trajectory is opened

        tok = AutoTokenizer.from_pretrained(str(model_path))
    except Exception:  # a broken tokenizer must not take the viewer down; ids are still exact
        return None
    return lambda ids: [str(tok.decode([i])) for i in ids]


class TrajectoryScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, rollout_id: str) -> None:
        super().__init__()
        self.rollout_id = rollout_id

    def compose(self) -> ComposeResult:
        yield Static(plain(f"trajectory · rollout {self.rollout_id}"), id="title", classes="title")
        yield Static("loading…", id="summary", classes="subtitle")
        with VerticalScroll(id="trajectory-body"):
            yield Static("", id="trajectory")
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._load(), group="trajectory")

    async def _load(self) -> None:
        summary, body = await asyncio.to_thread(self.load)
        self.query_one("#summary", Static).update(summary)
        self.query_one("#trajectory", Static).update(body)
        self.query_one("#trajectory-body").focus()

    def load(self) -> tuple[Content, Content]:
        app = cast("ApplianceApp", self.app)
        store = app.open_store()
        rollout = store.get_rollout(self.rollout_id)
        calls = store.model_calls(self.rollout_id)
        samples = store.samples(self.rollout_id)
        trained = sum(sum(s.mask) for s in samples)
        # the trainer logs the mean |engine - trainer| logprob over trained tokens of each step it takes
        gap = store.metric_tail(rollout.run_id, "logprob_gap_mean", 1) if rollout.run_id else []
        summary = Content(f"{rollout.outcome or rollout.status} · reward {_num(rollout.reward)} · "
                          f"{rollout.turns} turns · {len(calls)} calls · {len(samples)} samples "
                          f"({trained} trained tokens)")
        if gap:
            summary += f" · engine/trainer logprob gap {gap[-1][1]:.3f} (last step)"
        if rollout.error:
            summary += Content("\n") + plain(rollout.error, "red")
        if not calls:
            return summary, Content("no model calls recorded for this rollout")
        try:
            views = call_views(calls)
        except TrajectoryError as e:  # the trainer refuses these calls too: say why instead of placing them
            return summary, plain(f"the calls do not form a trajectory: {e.message}", "red")
        return summary, render(views, app.decoder())


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
