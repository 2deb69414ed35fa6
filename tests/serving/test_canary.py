"""The canary's comparison: exact on float32 serving, by log-probability distance on bfloat16 serving."""

from __future__ import annotations

from pathlib import Path

from appliance.config import load_settings
from appliance.serving.canary import Canary, Offset, compare

# the trainer's float32 reference: token 7 at position 2 is a near-tie with token 9 (margin 0.01 nats)
REFERENCE = Canary([5, 6, 7, 8], [-0.10, -0.50, -0.700, -0.20], [(1, -3.0), (2, -2.5), (9, -0.710), (3, -4.0)])
TOLERANCE = 0.05


def test_equal_tokens_within_the_tolerance_pass_and_report_the_distance() -> None:
    bf16 = Canary([5, 6, 7, 8], [-0.11, -0.48, -0.69, -0.21], [(1, -3.0), (2, -2.5), (9, -0.72), (3, -4.0)])
    verdict = compare(bf16, REFERENCE, TOLERANCE)
    assert verdict.ok and verdict.compared == 4
    assert abs(verdict.max_abs_delta - 0.02) < 1e-9 and abs(verdict.mean_abs_delta - 0.0125) < 1e-9


def test_an_argmax_flip_at_a_tiny_margin_passes() -> None:
    # bfloat16 moved the two near-tied logits past each other: the engine chose the runner-up 9
    flipped = Canary([5, 6, 9, 4], [-0.10, -0.49, -0.69, -1.0], [(1, -3.0), (2, -2.5), (7, -0.70), (8, -2.0)])
    verdict = compare(flipped, REFERENCE, TOLERANCE)
    assert verdict.ok, verdict.detail
    assert verdict.compared == 3 and "near-tie at token 2" in verdict.detail  # token 3 follows another context
    # ... which exact comparison (the float32 rule) would have rolled back
    assert not compare(flipped, REFERENCE, 0.0)


def test_a_real_divergence_fails() -> None:
    # same tokens, but the engine is far less sure of them: other weights (a stale lm_head, a lost adapter)
    drifted = Canary([5, 6, 7, 8], [-0.10, -1.30, -0.70, -0.20], [(1, -3.0), (2, -0.9), (9, -0.71), (3, -4.0)])
    verdict = compare(drifted, REFERENCE, TOLERANCE)
    assert not verdict and "token 1" in verdict.detail and "0.8000" in verdict.detail
    # a flip where the reference was sure (margin 2 nats) is no near-tie
    wrong = Canary([5, 2, 7, 8], [-0.10, -0.60, -0.7, -0.2], [(1, -3.0), (6, -0.8), (9, -0.71), (3, -4.0)])
    assert "margin 2.0000" in compare(wrong, REFERENCE, TOLERANCE).detail
    # a flip to a token the reference did not even rank second
    other = Canary([5, 6, 4, 8], [-0.10, -0.50, -0.69, -0.2], [(1, -3.0), (2, -2.5), (7, -0.70), (3, -4.0)])
    assert "runner-up 9" in compare(other, REFERENCE, TOLERANCE).detail
    # a near-tie in the reference, but the engine's own log-probability of its token is off
    far = Canary([5, 6, 9, 4], [-0.10, -0.49, -0.30, -1.0], [(1, -3.0), (2, -2.5), (7, -1.1), (8, -2.0)])
    assert not compare(far, REFERENCE, TOLERANCE)
    assert not compare(Canary([5, 6, 7]), REFERENCE, TOLERANCE)  # without log-probabilities: exact only


def test_float32_serving_stays_exact(tmp_path: Path) -> None:
    assert compare(Canary([5, 6, 7, 8]), REFERENCE, 0.0)
    # on the cpu profile even a tiny log-probability difference with equal tokens passes, as before
    assert compare(Canary([5, 6, 7, 8], [-0.1, -0.5, -0.7, -0.2], REFERENCE.runner_up), REFERENCE, 0.0)
    home = {"APPLIANCE_HOME": str(tmp_path)}
    assert load_settings(environ={**home, "APPLIANCE_PROFILE": "cpu"}).engine.canary_tolerance == 0.0
    assert load_settings(environ={**home, "APPLIANCE_PROFILE": "gpu"}).engine.canary_tolerance > 0.0


def test_canary_records_from_the_engine_and_the_reference() -> None:
    choice = {"token_ids": [5, 6], "logprobs": {
        "token_logprobs": [-0.1, -0.5],
        "top_logprobs": [{"token_id:5": -0.1, "token_id:1": -3.0}, {"token_id:2": -2.5, "token_id:6": -0.5}]}}
    assert Canary.from_completion(choice) == Canary([5, 6], [-0.1, -0.5], [(1, -3.0), (2, -2.5)])
    assert not Canary.from_completion({"token_ids": [5, 6]}).scored  # no logprobs asked: ids only
    reference = {"ids": [5, 6], "logprobs": [-0.1, -0.5], "runner_up": [[1, -3.0], [2, -2.5]]}
    assert Canary.from_json(reference) == Canary.from_completion(choice)
    assert Canary.from_json([5, 6]) == Canary([5, 6])


def shifted(canary: Canary, by: float) -> Canary:
    return Canary(canary.ids, [lp + by for lp in canary.logprobs], [(t, lp + by) for t, lp in canary.runner_up])


def test_the_offset_measured_at_the_base_is_taken_out_of_the_comparison() -> None:
    """Issue 46: bf16 kernels moved every log-probability by more than the tolerance, so every sync was rolled
    back; the offset the engine has from the reference on the same weights is not a divergence."""
    base = Canary([4, 3, 2], [-0.3, -0.4, -0.5], [(1, -2.0), (1, -2.0), (1, -2.0)])
    offset = Offset.measure(shifted(base, 0.5), base)
    assert offset is not None and abs(offset.mean - 0.5) < 1e-9 and offset.spread < 1e-9 and offset.compared == 3
    engine = shifted(REFERENCE, 0.5)  # the synced weights, served with the same offset
    assert not compare(engine, REFERENCE, TOLERANCE)  # the fixed tolerance alone rolls it back
    verdict = compare(engine, REFERENCE, TOLERANCE, offset)
    assert verdict.ok, verdict.detail
    assert abs(verdict.max_abs_delta - 0.5) < 1e-9  # the raw distance is still what is reported
    # a real divergence on top of the offset still fails, and says so
    drifted = Canary([5, 6, 7, 8], [-0.10, -1.30, -0.70, -0.20], [(1, -3.0), (2, -0.9), (9, -0.71), (3, -4.0)])
    verdict = compare(shifted(drifted, 0.5), REFERENCE, TOLERANCE, offset)
    assert not verdict and "token 1" in verdict.detail and "beyond the engine's offset +0.5000" in verdict.detail


def test_the_base_spread_widens_the_tolerance_and_nothing_measurable_is_no_offset() -> None:
    base = Canary([4, 3], [-0.3, -0.4], [(1, -2.0), (1, -2.0)])
    noisy = Canary([4, 3], [-0.2, -0.5], [(1, -2.0), (1, -2.0)])  # +0.1 then -0.1: mean 0, spread 0.1
    offset = Offset.measure(noisy, base)
    assert offset is not None and abs(offset.mean) < 1e-9 and abs(offset.spread - 0.1) < 1e-9
    engine = Canary(REFERENCE.ids, [-0.10, -0.50, -0.70, -0.32], REFERENCE.runner_up)  # 0.12 off at token 3
    assert not compare(engine, REFERENCE, TOLERANCE) and compare(engine, REFERENCE, TOLERANCE, offset)
    assert Offset.measure(Canary([9, 3]), base) is None  # no log-probabilities
    assert Offset.measure(Canary([9, 3], [-0.1, -0.1], [(1, -2.0)] * 2), base) is None  # differs from token 0
