"""Turn-level credit over a group's prefix tree: GAE with one value per assistant turn (`training.method =
"ppo"`), and the per-turn critic term GRPO can add (`training.turn_credit`).

Pure functions over `Sample`s (no torch): the critic's values come in as numbers, keyed by `TurnId`.

**Turns.** A trained turn is a maximal run of mask-1 tokens of a sample: one model call's completion (the
context between two completions, the observation and the template's glue, is never empty). Its *state* is
the token prefix before the run; the critic's value of that state is read at the last prefix token (the
position that predicts the turn's first token), so there is one value per turn.

**The tree.** A rollout's samples are the branches of its call tree (`appliance.trajectories`): a later
branch shares its parent's tokens up to the fork, where they are context (mask 0), so its path is its own
runs plus the runs of the other branches that lie inside the shared prefix. The rollouts of a group start
from the same prompt, and a small policy often samples the very same first command: those rollouts share
their turns token for token. Turns are therefore nodes keyed by their exact token prefix, across the
whole group, and a node is trained once, in the first sample (rollout id, branch order) that holds it; the
others keep its tokens as context (`dedup`).

**Returns.** A node's lambda-return averages its continuations over the rollouts through it, each rollout
weighing 1 however many of its branches pass (so a rollout whose history was rewritten k times does not
count k times), a branch continuing with the next node on its path or ending with its rollout's reward:

    G(a) = mean over rollouts r through a of  mean over r's paths p through a of  c_p(a)
    c_p(a) = R_r                                                 a is the last turn of p
           = gamma * ((1 - lambda) * V(next_p(a)) + lambda * G(next_p(a)))   otherwise

On a single chain this is exactly GAE: G_t - V(s_t) = sum_k (gamma lambda)^k delta_{t+k}, with
delta_t = gamma V(s_{t+1}) - V(s_t) and delta_T = R - V(s_T) (the reward is the outcome, at the end).

**Baselines.** A turn's advantage is G(a) - b(s): b is the critic's V(s), except at a *fork*, a state with
several distinct sampled turns (the group's first state, where the G rollouts differ, or a later state two
rollouts reached alike): there the siblings' returns, weighted by their rollouts, are the baseline, as a
local GRPO group (unbiased, where the critic of a small model is not yet). A shared turn's advantage is
computed once, from all the rollouts below it, and trained once: never once per rollout.

**gamma = 1, lambda = 0.95 (the defaults).** The reward is one outcome at the end and the harness caps an
episode at a few turns (4 on the cpu profile, 10 by default); discounting would only teach "stop early",
which the verifier does not ask for. lambda < 1 lets the critic's turn-to-turn differences tell the command
that solved the task from the ones that wandered; lambda close to 1 keeps the outcome dominant while the
critic is young (a fresh value head predicts 0 everywhere, so the first phase is the outcome alone):
lambda^3 = 0.86 over the cpu profile's four turns, lambda^9 = 0.63 over ten.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field, replace

from appliance.schemas import Sample

TurnId = tuple[str, int, int]  # (rollout id, branch, first token of the run)


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) spans of consecutive 1s (a sample's trained turns); token 0 is never trained."""
    out, start = [], None
    for i, m in enumerate(mask):
        if m and start is None and i > 0:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(mask)))
    return out


@dataclass(slots=True)
class Node:
    """One distinct turn of the group's tree."""

    start: int
    end: int
    state: bytes  # digest of the prefix before the turn (siblings share it)
    owners: list[TurnId] = field(default_factory=list)  # every sample run that is this turn, training order
    rollouts: set[str] = field(default_factory=set)
    value: float = 0.0  # the critic's V(state)
    ret: float = 0.0  # lambda-return G
    depth: int = 0  # turn index along its path (0 = the first turn)


@dataclass(slots=True)
class TurnCredit:
    """The credit of every sample run (`TurnId`): the node's advantage, return and turn index; `trained`
    is False for a run whose node is trained in another sample."""

    advantage: dict[TurnId, float]
    ret: dict[TurnId, float]
    value: dict[TurnId, float]
    depth: dict[TurnId, int]
    trained: dict[TurnId, bool]


def _digest(ids: list[int], end: int) -> bytes:
    return hashlib.blake2b(array("q", ids[:end]).tobytes(), digest_size=16).digest()


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def tree_credit(samples: list[Sample], values: dict[TurnId, float], rewards: dict[str, float], *,
                gamma: float = 1.0, lam: float = 0.95, fork_baseline: bool = True) -> TurnCredit:
    """Turn credit for the samples of one or more groups (see the module docstring).

    `values`: V(state) of each sample run (missing: 0.0); `rewards`: each rollout's outcome reward.
    """
    ordered = sorted(samples, key=lambda s: (s.group_id or "", s.rollout_id, s.branch))
    own = {(s.rollout_id, s.branch): runs(s.mask) for s in ordered}
    nodes: dict[bytes, Node] = {}
    paths: list[tuple[str, list[bytes]]] = []  # (rollout, the node keys along one sample's path)
    by_rollout: dict[str, list[Sample]] = {}
    for s in ordered:
        by_rollout.setdefault(s.rollout_id, []).append(s)
    for s in ordered:
        spans = [(a, b, s.branch) for a, b in own[(s.rollout_id, s.branch)]]
        for other in by_rollout[s.rollout_id]:  # the turns this branch shares with its rollout's other branches
            if other is s:
                continue
            shared = _common(s.token_ids, other.token_ids)
            spans += [(a, b, other.branch) for a, b in own[(other.rollout_id, other.branch)] if b <= shared]
        keys: list[bytes] = []
        for a, b, branch in sorted(set(spans)):
            group = (s.group_id or f"rollout:{s.rollout_id}").encode()
            key = group + _digest(s.token_ids, b) + a.to_bytes(4, "little")
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = Node(a, b, group + _digest(s.token_ids, a), depth=len(keys))
            tid = (s.rollout_id, branch, a)
            if branch == s.branch and tid not in node.owners:
                node.owners.append(tid)
            node.rollouts.add(s.rollout_id)
            if not keys or keys[-1] != key:  # an identical retry of a turn is the same node, once per path
                keys.append(key)
        paths.append((s.rollout_id, keys))
    for node in nodes.values():
        node.value = float(values.get(node.owners[0], 0.0)) if node.owners else 0.0

    # continuations of each node, per rollout: children always end later, so compute deepest-first
    conts: dict[bytes, dict[str, list[bytes | None]]] = {}
    for rollout, keys in paths:
        for i, key in enumerate(keys):
            conts.setdefault(key, {}).setdefault(rollout, []).append(keys[i + 1] if i + 1 < len(keys) else None)
    for key in sorted(nodes, key=lambda k: -nodes[k].end):
        node, per_rollout = nodes[key], conts[key]
        total = 0.0
        for rollout, nexts in per_rollout.items():
            parts = []
            for nxt in nexts:
                if nxt is None:
                    parts.append(rewards[rollout])
                else:
                    child = nodes[nxt]
                    parts.append(gamma * ((1 - lam) * child.value + lam * child.ret))
            total += sum(parts) / len(parts)
        node.ret = total / len(per_rollout)

    siblings: dict[bytes, list[Node]] = {}
    for node in nodes.values():
        siblings.setdefault(node.state, []).append(node)
    credit = TurnCredit({}, {}, {}, {}, {})
    for node in nodes.values():
        sibs = siblings[node.state]
        if fork_baseline and len(sibs) > 1:
            weight = sum(len(n.rollouts) for n in sibs)
            baseline = sum(len(n.rollouts) * n.ret for n in sibs) / weight
        else:
            baseline = node.value
        for i, tid in enumerate(node.owners):
            credit.advantage[tid] = node.ret - baseline
            credit.ret[tid] = node.ret
            credit.value[tid] = node.value
            credit.depth[tid] = node.depth
            credit.trained[tid] = i == 0
    return credit


def centred_per_rollout(credit: TurnCredit) -> TurnCredit:
    """The credit less each rollout's mean over its trained turns: a per-turn term that only redistributes
    the rollout's (group-normalised) outcome between its turns, so it never changes what the group said."""
    by_rollout: dict[str, list[float]] = {}
    for tid, adv in credit.advantage.items():
        if credit.trained[tid]:
            by_rollout.setdefault(tid[0], []).append(adv)
    means = {r: sum(v) / len(v) for r, v in by_rollout.items()}
    return replace(credit, advantage={tid: adv - means.get(tid[0], 0.0) for tid, adv in credit.advantage.items()})


def with_credit(samples: list[Sample], credit: TurnCredit, *, dedup: bool, outcome_coef: float = 0.0,
                turn_coef: float = 1.0) -> list[Sample]:
    """Samples carrying per-token advantages: outcome_coef x the sample's own (group) advantage plus
    turn_coef x its turn's credit on each trained run; with `dedup`, a run trained in another sample
    becomes context here (mask 0)."""
    out = []
    for s in samples:
        mask, adv = list(s.mask), [0.0] * len(s.mask)
        base = outcome_coef * float(s.advantage or 0.0)
        for a, b in runs(s.mask):
            tid = (s.rollout_id, s.branch, a)
            if dedup and not credit.trained.get(tid, True):
                mask[a:b] = [0] * (b - a)
                continue
            adv[a:b] = [base + turn_coef * credit.advantage.get(tid, 0.0)] * (b - a)
        out.append(replace(s, mask=mask, token_advantages=adv))
    return out
