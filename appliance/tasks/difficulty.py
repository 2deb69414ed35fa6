"""The difficulty controller: per family, the level to synthesize next and how much of the budget it gets.

It reads the diagnosis report (`schemas.CapabilityReport`, from `appliance.diagnosis.build_report`): `train`
as {family: {"level": {"n", "passed", "pass_rate"}}}, `band` as {family: {"learnable"|"too_easy"|"too_hard":
count}}. A family moves up a level when its current level is mastered (training pass rate >= high, or its
validated tasks are all too easy), down when everything fails (rate <= low, or all too hard), and stays
otherwise. The synthesis budget leans toward the families whose pass rate at their next level is nearest
50 % (weight p(1-p): where a group's rewards most often differ); a family with no data there gets the
prior's weight.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from appliance.schemas import CapabilityReport, Cells
from appliance.tasks.families import FAMILIES

CONTROL_BAND = (0.0, 0.8)
MIN_EVIDENCE = 4  # rollouts at a level before its pass rate moves the level


# Every decision below reads practice evidence only, never the held-out evaluation: a curriculum steered by
# the held-out set would be tuned to it, and the held-out curve would stop measuring transfer.


def _cell(report: CapabilityReport, family: str, level: int, cells: Cells | None = None) -> tuple[int, int]:
    """(n, passed) of a family's practice rollouts at a level (in `cells`, default the report's `train`)."""
    cell = (report.train if cells is None else cells).get(family, {}).get(str(level))
    if cell and cell.get("n"):
        return int(cell["n"]), int(cell.get("passed", round(cell.get("pass_rate", 0) * cell["n"])))
    return 0, 0


def next_levels(report: CapabilityReport | None, current: dict[str, int],
                band: tuple[float, float] = CONTROL_BAND, *, min_n: int = MIN_EVIDENCE) -> dict[str, int]:
    """The level of each family in `current` for the next round (1..5, one step at a time)."""
    if not report:
        return dict(current)
    low, high = band
    out = {}
    for family, level in current.items():
        n, passed = _cell(report, family, level)
        counts = report.band.get(family, {})
        learnable, easy, hard = (counts.get(k, 0) for k in ("learnable", "too_easy", "too_hard"))
        rate = passed / n if n else None
        up = (rate is not None and n >= min_n and rate >= high) or (easy > 0 and learnable == 0 and hard == 0)
        down = (rate is not None and n >= min_n and rate <= low) or (hard > 0 and learnable == 0 and easy == 0)
        out[family] = min(5, level + 1) if up and not down else max(1, level - 1) if down and not up else level
    return out


# The synthesis budget goes where a group of rollouts is most likely to carry a signal. A GRPO group has
# a non-zero advantage only when its rewards differ, which for a task passing with probability p is most
# likely near p = 0.5 and never at 0 or 1; the variance of one reward, p(1-p), is the weight. p is not
# known, so the weight is its expectation under a Beta posterior: Beta(PRIOR_PASSED + passed,
# PRIOR_FAILED + failed), E[p(1-p)] = ab / ((a+b)(a+b+1)). The uniform prior gives a family with no
# evidence 1/6 (a family measured at 50 % reaches 1/4) and shrinks 2/2 toward the middle, while 0/40
# falls to 0.02. VARIANCE_FLOOR keeps a family that always fails (or always passes) in the round, at a
# tenth of the best share, so a level that starts to move is noticed.
PRIOR_PASSED = 1.0
PRIOR_FAILED = 1.0
VARIANCE_FLOOR = 0.025


def expected_variance(passed: float, n: float, *, prior: tuple[float, float] = (PRIOR_PASSED, PRIOR_FAILED),
                      floor: float = VARIANCE_FLOOR) -> float:
    """E[p(1-p)] of a pass rate p after `passed` of `n` rollouts passed, under a Beta prior; at least `floor`."""
    a, b = prior[0] + passed, prior[1] + max(0.0, n - passed)
    return max(floor, a * b / ((a + b) * (a + b + 1)))


def _family_evidence(report: CapabilityReport, family: str, level: int | None) -> tuple[float, float]:
    """(passed, n) behind a family's weight: the practice cell at `level` when the round's level is known (a
    level never tried has none), otherwise the family's
    rollouts at every level, or its bare pass rate counted as MIN_EVIDENCE rollouts."""
    if level is not None:
        n, passed = _cell(report, family, level)
        return float(passed), float(n)
    cells = [c for c in (report.train.get(family) or {}).values() if c and c.get("n")]
    if cells:
        return (float(sum(c.get("passed", c.get("pass_rate", 0) * c["n"]) for c in cells)),
                float(sum(c["n"] for c in cells)))
    rate = report.family_pass_rate.get(family)
    return (float(rate) * MIN_EVIDENCE, float(MIN_EVIDENCE)) if rate is not None else (0.0, 0.0)


def split_budget(report: CapabilityReport | None, total: int, families: list[str] | None = None,
                 *, floor: int = 1, levels: dict[str, int] | None = None) -> dict[str, int]:
    """Tasks to synthesize per family: each gets `floor`, the rest goes in proportion to the expected
    reward variance p(1-p) of the family at the level it is synthesized at (`levels`; without it, over
    all its levels), so the families nearest a 50 % pass rate get the most draws."""
    families = list(families or FAMILIES)
    if not families:
        return {}
    known = report or CapabilityReport()
    weights = {f: expected_variance(*_family_evidence(known, f, (levels or {}).get(f))) for f in families}
    base = {f: min(floor, total // len(families)) for f in families}
    rest = total - sum(base.values())
    scale = sum(weights.values())
    shares = {f: rest * weights[f] / scale for f in families}
    out = {f: base[f] + int(shares[f]) for f in families}
    # Largest remainders take the units that rounding down left over.
    for f in sorted(families, key=lambda f: shares[f] - int(shares[f]), reverse=True)[: total - sum(out.values())]:
        out[f] += 1
    return out


def plan(report: CapabilityReport | None, current: dict[str, int], total: int,
         band: tuple[float, float] = CONTROL_BAND) -> list[tuple[str, int, int]]:
    """(family, level, count) for the next synthesis round."""
    levels = next_levels(report, current, band)
    budget = split_budget(report, total, list(current), levels=levels)
    return [(f, levels[f], budget[f]) for f in current if budget[f] > 0]


# --- the climbing controller -----------------------------------------------------------------------
# Evidence is pooled per family and level over the last `window` reports (each report's own `train_bare`
# cells and `band_levels` counts: per iteration, never cumulative over the run, and only tasks without a
# hint: a hinted success shows the hint works, not that the level is mastered), and judged with a
# Wilson 95 % interval, so 4 lucky or unlucky rollouts at T=0.7 do not move a family. A family climbs
# when the lower bound at its frontier clears `master`; it never goes back below the level after its
# highest mastered one (a failing frontier gets hinted tasks, demonstrations and replay instead of a
# cliff back to level 1). Infra errors are not evidence (the report's cells exclude them).

Z95 = 1.959964
MASTER_LOWER = 0.5  # the frontier is mastered when the 95 % lower bound of its pass rate reaches this
MAX_LEVEL = 5


def wilson(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95 % by default); (0, 1) without evidence."""
    if n <= 0:
        return 0.0, 1.0
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Decision:
    """One family's move, with the evidence and the reason the report prints."""

    family: str
    before: int
    level: int  # the frontier for the next round
    mastered: int  # highest level mastered so far (0 = none)
    n: int
    passed: int
    low: float
    high: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pooled(reports: list[CapabilityReport], family: str, level: int, *, bare: bool = False) -> tuple[int, int]:
    """(n, passed) of a family at a level summed over `reports` (oldest first, any number): their `train`
    cells, or with `bare` their `train_bare` cells (a report written before those existed counts with its
    `train` cells)."""
    n = passed = 0
    for r in reports:
        cells = r.train_bare if bare and r.train_bare is not None else r.train
        rn, rp = _cell(r, family, level, cells)
        n, passed = n + rn, passed + rp
    return n, passed


def _band(reports: list[CapabilityReport], family: str, level: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reports:
        for k, v in r.band_levels.get(family, {}).get(str(level), {}).items():
            out[k] = out.get(k, 0) + int(v)
    return out


def decide(reports: list[CapabilityReport], current: dict[str, int], mastered: dict[str, int], *,
           window: int = 3, master: float = MASTER_LOWER, min_n: int = MIN_EVIDENCE) -> dict[str, Decision]:
    """Each family's next frontier from the last `window` reports (the newest last)."""
    recent = [r for r in reports if r][-window:]
    its = [r.iteration for r in recent if r.iteration is not None]
    span = (f"iteration {its[0]}" if len(its) == 1 else f"iterations {its[0]}-{its[-1]}") if its else "no iterations"
    out = {}
    for family, level in current.items():
        floor = mastered.get(family, 0)
        n, passed = pooled(recent, family, level, bare=True)  # hinted tasks are not mastery
        source = "unhinted practice"
        low, high = wilson(passed, n)
        band = _band(recent, family, level)
        all_easy = band.get("too_easy", 0) >= 3 and not band.get("learnable") and not band.get("too_hard")
        evidence = (f"{passed}/{n} {source} rollouts at L{level} over {span} "
                    f"(95 % interval {low:.2f}-{high:.2f})") if n else f"no rollouts at L{level} over {span}"
        if (n >= min_n and low >= master) or all_easy:
            floor = max(floor, level)
            nxt = min(MAX_LEVEL, level + 1)
            why = f"lower bound {low:.2f} >= {master:.2f}" if n >= min_n and low >= master else \
                f"all {band['too_easy']} tasks too easy"
            reason = (f"mastered L{level} ({evidence}; {why}): " +
                      (f"moves up to L{nxt}" if nxt > level else "stays at the top level"))
        elif n < min_n:
            nxt, reason = level, f"stays at L{level}: too little evidence ({evidence}; needs {min_n})"
        else:
            nxt = max(level, min(MAX_LEVEL, floor + 1))
            stuck = passed == 0 or high < 0.2
            reason = (f"stays at L{level}: not yet mastered ({evidence}); " +
                      ("nothing passes yet: hinted tasks, demonstrations and replay of mastered levels"
                       if stuck else "learnable: more practice at this level"))
            if floor:
                reason += f"; never below L{min(MAX_LEVEL, floor + 1)} (L{floor} mastered)"
        out[family] = Decision(family, level, nxt, floor, n, passed, low, high, reason)
    return out


@dataclass
class RoundPlan:
    """What one synthesis round makes per family: new tasks at the frontier, stretch tasks one level up
    (hinted where the family offers hints) and replays of earlier tasks."""

    family: str
    level: int
    new: int
    stretch: int
    replay: int

    @property
    def total(self) -> int:
        return self.new + self.stretch + self.replay


def size_round(families: list[str], levels: dict[str, int], *, tasks_per_iteration: int, per_family: int = 3,
               stretch_share: float = 0.25, replay_share: float = 0.25,
               replay_available: dict[str, int] | None = None) -> list[RoundPlan]:
    """Tasks per family: at least `per_family`, the iteration's total spread evenly; of each family's share,
    `stretch_share` one level above the frontier (none at the top) and `replay_share` replayed (as far as
    the pool has tasks), the rest new at the frontier."""
    if not families:
        return []
    each = max(per_family, -(-tasks_per_iteration // len(families)))
    out = []
    for f in families:
        level = levels.get(f, 1)
        stretch = round(each * stretch_share) if level < MAX_LEVEL else 0
        replay = min(round(each * replay_share), (replay_available or {}).get(f, 0))
        new = max(1, each - stretch - replay)
        out.append(RoundPlan(f, level, new, stretch, replay))
    return out


def replay_pool(tasks: list[Any], levels: dict[str, int]) -> dict[str, list[Any]]:
    """Per family, the tasks worth practising again: the latest copy of each task (by spec id) still
    `learnable` at or below the frontier, frontier level first. A task whose latest practice was too easy is
    mastered and leaves the pool; too hard ones wait until the frontier reaches them."""
    latest: dict[str, Any] = {}
    for t in sorted(tasks, key=lambda t: (t.created_at, t.id)):
        if str(t.split) != "train" or str(t.status) not in ("learnable", "too_easy", "too_hard"):
            continue
        latest[t.spec["id"]] = t
    out: dict[str, list[Any]] = {}
    for t in latest.values():
        if str(t.status) == "learnable" and t.difficulty <= levels.get(t.family, 1):
            out.setdefault(t.family, []).append(t)
    for f in out:
        out[f].sort(key=lambda t: (-t.difficulty, -(t.pass_rate or 0.0), t.id))
    return out
