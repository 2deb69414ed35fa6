"""The difficulty controller: per family, the level to synthesize next and how much of the budget it gets.

It reads the diagnosis report's JSON (`appliance.diagnosis.build_report`): `train` and `heldout` as
{family: {"level": {"n", "passed", "pass_rate"}}}, `band` as {family: {"learnable"|"too_easy"|"too_hard":
count}}. A family moves up a level when its current level is mastered (training pass rate >= high, or its
validated tasks are all too easy), down when everything fails (rate <= low, or all too hard), and stays
otherwise. Weak families get more of the synthesis budget; a family with no data counts as weak.
"""

from __future__ import annotations

from typing import Any

from appliance.tasks.families import FAMILIES

CONTROL_BAND = (0.0, 0.8)
MIN_EVIDENCE = 4  # rollouts at a level before its pass rate moves the level


def _cell(report: dict[str, Any], family: str, level: int) -> tuple[int, int]:
    """(n, passed) of a family at a level, training rollouts first, the held-out eval as fallback."""
    for key in ("train", "heldout"):
        cell = (report.get(key) or {}).get(family, {}).get(str(level))
        if cell and cell.get("n"):
            return int(cell["n"]), int(cell.get("passed", round(cell.get("pass_rate", 0) * cell["n"])))
    return 0, 0


def next_levels(report: dict[str, Any] | None, current: dict[str, int],
                band: tuple[float, float] = CONTROL_BAND, *, min_n: int = MIN_EVIDENCE) -> dict[str, int]:
    """The level of each family in `current` for the next round (1..5, one step at a time)."""
    if not report:
        return dict(current)
    low, high = band
    out = {}
    for family, level in current.items():
        n, passed = _cell(report, family, level)
        counts = (report.get("band") or {}).get(family, {})
        learnable, easy, hard = (counts.get(k, 0) for k in ("learnable", "too_easy", "too_hard"))
        rate = passed / n if n else None
        up = (rate is not None and n >= min_n and rate >= high) or (easy > 0 and learnable == 0 and hard == 0)
        down = (rate is not None and n >= min_n and rate <= low) or (hard > 0 and learnable == 0 and easy == 0)
        out[family] = min(5, level + 1) if up and not down else max(1, level - 1) if down and not up else level
    return out


def split_budget(report: dict[str, Any] | None, total: int, families: list[str] | None = None,
                 *, floor: int = 1) -> dict[str, int]:
    """Tasks to synthesize per family: each gets `floor`, the rest goes in proportion to 1 - pass rate."""
    families = list(families or FAMILIES)
    if not families:
        return {}
    rates = (report or {}).get("family_pass_rate") or {}
    weights = {f: 1.0 - float(rates[f]) + 0.05 if f in rates else 1.05 for f in families}
    base = {f: min(floor, total // len(families)) for f in families}
    rest = total - sum(base.values())
    scale = sum(weights.values())
    shares = {f: rest * weights[f] / scale for f in families}
    out = {f: base[f] + int(shares[f]) for f in families}
    # Largest remainders take the units that rounding down left over.
    for f in sorted(families, key=lambda f: shares[f] - int(shares[f]), reverse=True)[: total - sum(out.values())]:
        out[f] += 1
    return out


def plan(report: dict[str, Any] | None, current: dict[str, int], total: int,
         band: tuple[float, float] = CONTROL_BAND) -> list[tuple[str, int, int]]:
    """(family, level, count) for the next synthesis round."""
    levels = next_levels(report, current, band)
    budget = split_budget(report, total, list(current))
    return [(f, levels[f], budget[f]) for f in current if budget[f] > 0]
