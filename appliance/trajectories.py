"""A rollout's model calls → a prefix tree over token ids → training samples.

The trainer trains on the exact token ids the engine saw and sampled, never on re-tokenized text. This
module only rearranges the ids the proxy recorded (`ModelCall.prompt_ids`, `completion_ids`, `logprobs`);
it never tokenizes anything, so the report's `retokenized_tokens` is 0 by construction.

How a call attaches (calls with status "ok" or "side", in `seq` order; the others are counted and skipped):

1. **Merge.** If the call's prompt extends the full token sequence of an existing branch (that branch's
   sequence is a prefix of the prompt), the call continues the deepest such branch (ties: the one most
   recently extended). The prompt tokens beyond the branch are context (mask 0: the tool observation,
   the next user turn, the template's glue) and the completion is appended as sampled tokens (mask 1).
   A multi-turn chat whose template re-renders every earlier turn byte for byte is therefore one branch.
2. **Branch.** Otherwise history was rewritten (compaction, a retry of an earlier turn, a sub-agent with
   its own conversation, a template that re-renders an earlier turn differently, e.g. `<|im_end|>` kept
   by the engine but re-rendered with different glue, or content re-tokenized by the server). The call
   starts a new branch that shares the longest common prefix with the existing branches (ties: the most
   recently extended branch) and continues with the rest of its own prompt (mask 0) and its completion
   (mask 1). The branch it left stays a separate leaf, so nothing it sampled is lost. A `Divergence`
   records where (call seq, position), how many tokens of the old path the new prompt dropped (and how
   many of those were sampled), and how many prompt tokens replace them.

Every branch is a root-to-leaf path of the tree (a branch does not end where another continues: that
would have been a merge; only a retry that re-sampled the very same tokens, or sampled none, can end
inside another path), and each branch with at least one sampled token becomes one `Sample`.

**A sampled token is trained exactly once.** The branch that first sampled a token owns it; in any later
branch that shares it as prefix it is context (mask 0, logprob 0.0). Why: each sampled token is one
action of the policy. Training it again in every branch that forks after it would multiply its gradient
weight by the number of later history rewrites, biasing the update towards whatever preceded a
compaction or retry. The later branch still carries the shared tokens, so its own sampled tokens are
conditioned on exactly the prompt the engine saw. Invariant (tested with hypothesis): for every call,
`prompt_ids + completion_ids` is a prefix of the sample that trains its completion.

**Side calls are their own branches, never trained.** A harness's side call (status "side": a title, a
summary, a compaction on its small model, `proxy.side_models`) merges only into a side branch and forks
from whichever branch shares most of its prompt (a summary shares the conversation it summarizes); a
working call never merges into a side branch nor forks from one. Its tokens are recorded as sampled and
never trained (mask 0), and it rewrites no history (no `Divergence`). With `proxy.train_side_calls` the
proxy records them as "ok" calls, which this module then treats as working turns.

Two identical retries (same prompt, same sampled completion) are two engine samples and become two
sibling branches with the same tokens; each trains its own sampling once.

**One temperature per sample.** The trainer divides a sample's logits by one temperature (the one its
tokens were sampled at; see appliance.training.loss). A branch takes the temperature of the first call
that trains tokens in it; a later call of that branch sampled at another temperature keeps its tokens as
context (mask 0), counted in the report's `other_temperature_tokens`: training them at the wrong
temperature would make their importance ratio lie. A call at temperature 0 (greedy) is 1.0 here: the
engine's greedy logprobs are the unscaled ones.

Not covered here: advantages and group baselines (appliance.training), truncation to a training context
length (the trainer cuts at the end; `truncation` counts what it cuts), and anything that needs a tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.errors import TrajectoryError
from appliance.schemas import ModelCall, Sample


@dataclass(slots=True)
class Segment:
    """What one call contributed to a branch: context tokens [start, completion_start), sampled tokens
    [completion_start, end)."""

    call_seq: int
    start: int
    completion_start: int
    end: int


@dataclass(slots=True)
class Branch:
    """One root-to-leaf path of the prefix tree."""

    index: int
    parent: int | None  # the branch whose path this one left at `fork` (None: the first branch)
    fork: int  # tokens [0, fork) are shared with `parent` and trained (if at all) there
    token_ids: list[int]
    mask: list[int]  # 1 where this branch trains the token: sampled here, not in an earlier branch
    logprobs: list[float]  # the engine's logprob where mask is 1, else 0.0
    sampled: list[int]  # 1 where the token was engine-sampled by any branch (provenance, for display)
    segments: list[Segment] = field(default_factory=list)
    policy_versions: set[int] = field(default_factory=set)
    last_seq: int = -1  # seq of the call that last extended it (tie-breaks prefer recent branches)
    temperature: float | None = None  # the sampling temperature of the tokens it trains
    other_temperature: int = 0  # sampled tokens kept as context: sampled at another temperature
    side: bool = False  # the branch of a harness's side calls: recorded, never trained


@dataclass(slots=True)
class Divergence:
    """Where a call rewrote history and started a new branch."""

    call_seq: int
    branch: int  # the new branch
    parent: int  # the branch whose path it left
    position: int  # length of the shared prefix
    discarded: int  # tokens of the parent's path after `position` that the new prompt does not contain
    discarded_sampled: int  # ... of which the engine had sampled (still trained, in the parent's sample)
    rerendered: int  # prompt tokens after `position` that replace them


@dataclass(slots=True)
class Tree:
    branches: list[Branch]
    divergences: list[Divergence]
    calls: int  # "ok" calls placed in the tree
    skipped_calls: int  # calls with another status (engine or proxy error): they sampled nothing usable
    side_calls: int = 0  # "side" calls placed in the tree, on side branches


@dataclass(slots=True)
class TrajectoryReport:
    calls: int
    skipped_calls: int
    branches: int
    samples: int  # branches with at least one sampled token
    sampled_tokens: int  # == the sum of len(completion_ids) over the ok calls
    context_tokens: int  # mask-0 tokens over all samples (shared prefixes count once per sample)
    divergences: list[Divergence]
    policy_versions: list[int]
    retokenized_tokens: int = 0  # always 0: the builder never tokenizes text
    other_temperature_tokens: int = 0  # sampled, but not trained: their branch trains another temperature
    side_calls: int = 0  # the harness's side calls, each on a side branch, not trained

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix, by bisection over C-level slice comparisons (O(n), no Python loop
    per token: prompts run to thousands of tokens and a rollout has one comparison per branch)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _checked(calls: Iterable[ModelCall]) -> tuple[list[ModelCall], int]:
    """(the ok and side calls in seq order, how many others)."""
    ordered = sorted(calls, key=lambda c: c.seq)
    seqs = [c.seq for c in ordered]
    if len(set(seqs)) != len(seqs):
        dup = sorted({s for s in seqs if seqs.count(s) > 1})
        raise TrajectoryError(
            f"model calls of rollout {ordered[0].rollout_id!r} repeat seq {dup}",
            "each call of a rollout needs its own seq; the proxy numbers them as they arrive",
        )
    rollouts = {c.rollout_id for c in ordered}
    if len(rollouts) > 1:
        raise TrajectoryError(
            f"the builder got calls of several rollouts: {sorted(rollouts)}",
            "build one tree per rollout: pass only the calls of that rollout",
        )
    ok = [c for c in ordered if c.status in ("ok", "side")]
    for c in ok:
        if c.status == "ok" and len(c.logprobs) != len(c.completion_ids):
            raise TrajectoryError(
                f"call seq {c.seq} of rollout {c.rollout_id!r} has {len(c.completion_ids)} completion ids "
                f"but {len(c.logprobs)} logprobs",
                "the proxy must ask the engine for logprobs=True (one logprob per sampled token) and record "
                "them with the completion ids",
            )
    return ok, len(ordered) - len(ok)


def _merge_target(branches: list[Branch], prompt: list[int]) -> Branch | None:
    """The deepest branch whose whole sequence is a prefix of `prompt` (ties: most recently extended)."""
    best: Branch | None = None
    for b in branches:
        n = len(b.token_ids)
        if n > len(prompt) or (n and b.token_ids[-1] != prompt[n - 1]):
            continue
        if prompt[:n] != b.token_ids:
            continue
        if best is None or n > len(best.token_ids) or (n == len(best.token_ids) and b.last_seq > best.last_seq):
            best = b
    return best


def _fork_source(branches: list[Branch], prompt: list[int]) -> tuple[Branch, int]:
    """The branch sharing the longest prefix with `prompt` (ties: most recently extended) and that length."""
    best, best_k = branches[0], -1
    for b in branches:
        k = _common_prefix(b.token_ids, prompt)
        if k > best_k or (k == best_k and b.last_seq > best.last_seq):
            best, best_k = b, k
    return best, best_k


def sampling_temperature(call: ModelCall) -> float:
    """The temperature whose logprobs the engine returned for this call (1.0 unrecorded or greedy)."""
    t = call.temperature
    return 1.0 if t is None or t < 1e-5 else float(t)


def _append(branch: Branch, call: ModelCall, context: list[int]) -> None:
    start = len(branch.token_ids)
    completion_start = start + len(context)
    n = len(call.completion_ids)
    temperature = sampling_temperature(call)
    if n and branch.temperature is None and not branch.side:
        branch.temperature = temperature
    trained = not branch.side and (n == 0 or branch.temperature == temperature)
    branch.other_temperature += 0 if trained or branch.side else n
    branch.token_ids += context
    branch.token_ids += call.completion_ids
    branch.mask += [0] * len(context)
    branch.mask += [int(trained)] * n
    branch.sampled += [0] * len(context)
    branch.sampled += [1] * n
    branch.logprobs += [0.0] * len(context)
    branch.logprobs += [float(x) for x in call.logprobs] if trained else [0.0] * n
    branch.segments.append(Segment(call.seq, start, completion_start, len(branch.token_ids)))
    branch.policy_versions.add(call.policy_version)
    branch.last_seq = call.seq


def build_tree(calls: Iterable[ModelCall]) -> Tree:
    """Place the ok calls of one rollout, in seq order, into a prefix tree (see the module docstring)."""
    ok, skipped = _checked(calls)
    branches: list[Branch] = []
    divergences: list[Divergence] = []
    for call in ok:
        prompt, side = call.prompt_ids, call.status == "side"
        target = _merge_target([b for b in branches if b.side == side], prompt)
        if target is not None:
            _append(target, call, prompt[len(target.token_ids):])
            continue
        sources = branches if side else [b for b in branches if not b.side]
        if not sources:
            branch = Branch(len(branches), None, 0, [], [], [], [], side=side)
        else:
            source, k = _fork_source(sources, prompt)
            branch = Branch(
                index=len(branches), parent=source.index, fork=k,
                token_ids=source.token_ids[:k], mask=[0] * k, logprobs=[0.0] * k, sampled=source.sampled[:k],
                side=side,
            )
            if not side:
                divergences.append(Divergence(
                    call_seq=call.seq, branch=branch.index, parent=source.index, position=k,
                    discarded=len(source.token_ids) - k, discarded_sampled=sum(source.sampled[k:]),
                    rerendered=len(prompt) - k,
                ))
        branches.append(branch)
        _append(branch, call, prompt[len(branch.token_ids):])
    sides = sum(c.status == "side" for c in ok)
    return Tree(branches, divergences, calls=len(ok) - sides, skipped_calls=skipped, side_calls=sides)


def tree_samples(tree: Tree, *, rollout_id: str, group_id: str | None) -> list[Sample]:
    """One sample per branch that trains at least one token. A branch's policy version is the oldest
    that sampled its tokens (weights do not change mid-rollout unless a sync raced it; oldest is the
    conservative choice for off-policy corrections)."""
    return [
        Sample(
            rollout_id=rollout_id, group_id=group_id, branch=b.index,
            token_ids=list(b.token_ids), mask=list(b.mask), logprobs=list(b.logprobs),
            policy_version=min(b.policy_versions), temperature=b.temperature or 1.0,
        )
        for b in tree.branches
        if any(b.mask)
    ]


def build_samples(
    calls: Iterable[ModelCall], *, rollout_id: str, group_id: str | None
) -> tuple[list[Sample], TrajectoryReport]:
    """The training samples of one rollout and a report of how its calls fitted together."""
    tree = build_tree(calls)
    samples = tree_samples(tree, rollout_id=rollout_id, group_id=group_id)
    sampled = sum(sum(s.mask) for s in samples)
    report = TrajectoryReport(
        calls=tree.calls,
        skipped_calls=tree.skipped_calls,
        branches=len(tree.branches),
        samples=len(samples),
        sampled_tokens=sampled,
        context_tokens=sum(len(s.mask) for s in samples) - sampled,
        divergences=tree.divergences,
        policy_versions=sorted({v for b in tree.branches for v in b.policy_versions}),
        other_temperature_tokens=sum(b.other_temperature for b in tree.branches),
        side_calls=tree.side_calls,
    )
    return samples, report


def truncation(samples: Iterable[Sample], max_len: int) -> tuple[int, int]:
    """(trained tokens, rollouts) that a cut at `max_len` tokens leaves untrained.

    The trainer keeps the first `max_len` tokens of a sample: each kept token keeps its exact prefix, so
    what is trained is still what the engine saw. A tail past the cut cannot be trained exactly (its
    context would be gone), so it is dropped, and counted here as a metric of every step."""
    tokens, rollouts = 0, set()
    for s in samples:
        cut = sum(s.mask[max_len:])
        if cut:
            tokens += cut
            rollouts.add(s.rollout_id)
    return tokens, len(rollouts)
