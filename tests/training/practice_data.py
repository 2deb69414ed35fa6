"""Synthetic practice for the training tests: finished rollouts of named groups and their samples."""

from __future__ import annotations

import random

from appliance.schemas import Outcome, Rollout, RolloutStatus, Sample

# a prompt, two assistant turns with a tool result between them
MASK = [0] * 10 + [1] * 6 + [0] * 4 + [1] * 4


def practice(groups: dict[str, list[float | None]], seed: int = 0, extra: dict[str, int] | None = None):
    """Rollouts and samples; `extra` gives a group's samples that many more tokens (uneven shards)."""
    rng = random.Random(seed)
    rollouts, samples = [], []
    for g, rewards in groups.items():
        mask = MASK + [1] * (extra or {}).get(g, 0)
        for i, r in enumerate(rewards):
            rid = f"{g}-{i}"
            outcome = Outcome.INFRA_ERROR if r is None else (Outcome.SUCCESS if r > 0 else Outcome.FAILURE)
            rollouts.append(Rollout(rid, "run", "t", g, 0, "builtin", 0, RolloutStatus.FINISHED,
                                    outcome=outcome, reward=r or 0.0))
            samples.append(Sample(rid, g, 0, [rng.randrange(2, 2000) for _ in mask], list(mask),
                                  [-5.0 * m for m in mask], 0))
    return rollouts, samples
