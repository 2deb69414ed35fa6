"""The trajectory viewer: every model call of one rollout, its tokens coloured by where they came from.

Per call: the history it shares with an earlier call is folded away; the tokens that are new in its
prompt (the task on the first call, tool results and harness text afterwards) are shown apart from
the tokens the engine sampled (the only ones training learns from). Where a prompt does not extend any
earlier call (the harness rewrote its history: compaction, sub-agent, retry) a branch point is marked,
as the prefix tree in `trajectories` sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from appliance.schemas import ModelCall

if TYPE_CHECKING:
    from appliance.tui.app import ApplianceApp

Decoder = Callable[[list[int]], list[str]]  # token ids -> one display string per token
MAX_TOKENS_SHOWN = 1500
LEGEND = "[b]legend[/b] [dim]prompt[/] [yellow]tool / harness[/] [reverse green]sampled[/] [magenta]⑂ branch[/]"


@dataclass(frozen=True, slots=True)
class CallView:
    seq: int
    parent: int | None  # seq of the earlier call whose sequence this prompt continues
    shared: int  # prompt tokens shared with that call
    branch: bool  # True when the prompt leaves the parent's sequence before its end
    new_prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    logprobs: tuple[float, ...]
    latency_s: float
    error: str | None


def call_views(calls: list[ModelCall]) -> list[CallView]:
    """Place each call under the earlier call it shares the longest prefix with."""
    views: list[CallView] = []
    seqs: list[tuple[int, list[int]]] = []
    for call in calls:
        parent, shared, parent_len = None, 0, 0
        for seq, tokens in seqs:
            n = common_prefix(call.prompt_ids, tokens)
            if n and n >= shared:  # ties go to the latest call: the history a rewrite replaced
                parent, shared, parent_len = seq, n, len(tokens)
        views.append(CallView(call.seq, parent, shared, parent is not None and shared < parent_len,
                              tuple(call.prompt_ids[shared:]), tuple(call.completion_ids), tuple(call.logprobs),
                              call.latency_s, call.error))
        seqs.append((call.seq, call.prompt_ids + call.completion_ids))
    return views


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def render(views: list[CallView], decode: Decoder | None) -> str:
    out = [LEGEND]
    for v in views:
        mean = sum(v.logprobs) / len(v.logprobs) if v.logprobs else None
        head = f"── call {v.seq} · {len(v.new_prompt)} new prompt + {len(v.sampled)} sampled tokens · {v.latency_s:.2f} s"
        if mean is not None:
            head += f" · mean logprob {mean:.2f}"
        out += ["", f"[b]{head}[/b]"]
        if v.error:
            out.append(f"[red]error: {escape(v.error)}[/]")
        if v.branch:
            out.append(f"[magenta]⑂ branch: leaves call {v.parent}'s sequence after {v.shared} tokens"
                       " (history rewritten)[/]")
        if v.shared:
            out.append(f"[dim]… {v.shared} tokens shared with call {v.parent} …[/]")
        style = "dim" if v.parent is None else "yellow"
        out.append(tokens_markup(v.new_prompt, decode, style) + tokens_markup(v.sampled, decode, "reverse green"))
    return "\n".join(out)


def tokens_markup(ids: tuple[int, ...], decode: Decoder | None, style: str) -> str:
    if not ids:
        return ""
    shown = list(ids[:MAX_TOKENS_SHOWN])
    pieces = decode(shown) if decode else [f"{i} " for i in shown]
    more = f" [dim]… {len(ids) - len(shown)} more[/]" if len(ids) > len(shown) else ""
    return f"[{style}]{escape(''.join(pieces))}[/]{more}"


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
        yield Static(f"trajectory · rollout {escape(self.rollout_id)}", id="title", classes="title")
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

    def load(self) -> tuple[str, str]:
        app = cast("ApplianceApp", self.app)
        store = app.open_store()
        rollout = store.get_rollout(self.rollout_id)
        calls = store.model_calls(self.rollout_id)
        samples = store.samples(self.rollout_id)
        trained = sum(sum(s.mask) for s in samples)
        # the trainer logs the mean |engine - trainer| logprob over trained tokens of each step it takes
        gap = store.metric_tail(rollout.run_id, "logprob_gap_mean", 1) if rollout.run_id else []
        summary = (f"{rollout.outcome or rollout.status} · reward {_num(rollout.reward)} · {rollout.turns} turns · "
                   f"{len(calls)} calls · {len(samples)} samples ({trained} trained tokens)")
        if gap:
            summary += f" · engine/trainer logprob gap {gap[-1][1]:.3f} (last step)"
        if rollout.error:
            summary += f"\n[red]{escape(rollout.error)}[/]"
        decode = app.decoder() if calls else None
        return summary, render(call_views(calls), decode) if calls else "no model calls recorded for this rollout"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
