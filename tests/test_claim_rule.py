"""The verdict rule says no more than its data (cases it once got wrong, as known answers): no certainty from a tie
between seeds, no lead from a tie, min_effect as the threshold of "supported", each distinct test image counted once,
parity read as parity with the side ahead said, exact counts under their relation, one-seed margin verdicts when
asked."""

from __future__ import annotations

import numpy as np
import pytest
import report_fixtures as fixtures
from scipy import stats as sps

from capsbench.reporting.claim_files import Check, Claim, Side
from capsbench.reporting.claim_tests import BELOW_MIN_EFFECT
from capsbench.reporting.frame import records_frame
from capsbench.reporting.verdicts import (
    PROTOCOL_NOT_MET,
    REPRODUCED,
    SUPPORTED,
    UNRESOLVED,
    Run,
    judge,
    printed_match,
)
from capsbench.suites import SUITES
from capsbench.util.stats import accuracy_fields


def claim(metric: str = "test_accuracy", suite: str = "accuracy", **kw) -> Claim:
    sides = {"better": Side("capsnet"), "worse": Side("cnn_sabour")}
    return Claim(id="c", statement="s", source="A. Author. Paper. 2019", where="Abstract", suite=suite,
                 dataset="mnist", metric=metric, **{**sides, **kw})


def run(records: list[dict], suite: str = "accuracy") -> Run:
    return Run(records_frame(records, SUITES.get(suite)), {"capsnet": {}, "cnn_sabour": {}}, {}, "quick")


def values(model: str, vs: list[float], metric: str = "test_accuracy", suite: str = "accuracy", **cols) -> list[dict]:
    return [fixtures.value(suite, model, metric, v, seed=s, **cols) for s, v in enumerate(vs)]


def right_first(model: str, rights: list[int], n: int) -> list[dict]:
    return [fixtures.acc("accuracy", model, "test_accuracy", k, n, seed=s) for s, k in enumerate(rights)]


def discordant(only_capsnet: int, only_cnn: int, n: int, seeds: int) -> list[dict]:
    """`seeds` seeds with the same outcomes on the same n images: capsnet alone right on only_capsnet, the CNN alone
    on only_cnn, both on half the images."""
    both = n // 2
    a = np.zeros(n, dtype=bool)
    b = np.zeros(n, dtype=bool)
    a[:both] = b[:both] = True
    a[both:both + only_capsnet] = True
    b[both + only_capsnet:both + only_capsnet + only_cnn] = True
    return [{"suite": "accuracy", "model": model, "dataset": "mnist", "seed": s, "metric": "test_accuracy",
             **accuracy_fields(x)} for s in range(seeds) for model, x in (("capsnet", a), ("cnn_sabour", b))]


def test_two_seeds_tied_at_4_9_against_a_margin_of_5_are_not_resolved():
    """Once "supported" with p = 1.1e-14 from a spread of float rounding."""
    records = values("capsnet", [50.0, 52.0]) + values("cnn_sabour", [45.1, 47.1])  # +4.9 in both seeds
    j = judge(claim(relation="no_better", margin=5.0), run(records))
    assert j.verdict == UNRESOLVED and j.p == 1.0 and "no spread between seeds" in j.reason


def test_two_seeds_at_exactly_10_01x_against_10x_are_not_resolved():
    """Once "supported" with p = 2.8e-13."""
    speed = claim("latency", "efficiency", better=Side("cnn_sabour"), worse=Side("capsnet"), sweep={"batch": 1},
                  ratio=10)
    records = (values("cnn_sabour", [2.0, 3.0], "latency", "efficiency", batch=1)
               + values("capsnet", [20.02, 30.03], "latency", "efficiency", batch=1))
    j = judge(speed, run(records, "efficiency"))
    assert j.verdict == UNRESOLVED and j.p == 1.0 and "a factor of 10" in j.reason


def test_a_seed_that_ties_is_no_lead():
    """Per-seed differences 2.0, 0.0, 2.1, 2.0, 1.9, 2.0 were "supported", "same direction in all 6 seeds"."""
    cnn = [9000] * 6
    capsnet = [9200, 9000, 9210, 9200, 9190, 9200]
    j = judge(claim(), run(right_first("capsnet", capsnet, 10000) + right_first("cnn_sabour", cnn, 10000)))
    assert j.verdict == UNRESOLVED and "tied in seed(s) 1: a zero difference is no lead" in j.reason


def test_min_effect_is_the_threshold_of_supported():
    """`min_effect: 10` ("far more resistance") was "supported" by leads of 1.0, 1.2 and 0.9 points; now the
    estimate lies below min_effect, and the row says so instead of asking for more seeds."""
    records = right_first("capsnet", [9100, 9120, 9090], 10000) + right_first("cnn_sabour", [9000] * 3, 10000)
    far = judge(claim(min_effect=10.0), run(records))
    assert far.verdict == UNRESOLVED and far.needs == BELOW_MIN_EFFECT
    assert "below the claim's min_effect of 10" in far.reason
    assert "mean difference +1.03 points (95 % interval" in far.reason
    assert judge(claim(), run(records)).verdict == SUPPORTED  # without min_effect: any lead in every seed
    assert judge(claim(min_effect=0.5), run(records)).verdict == SUPPORTED  # an interval above 0.5


def test_a_gap_below_min_effect_asks_for_no_more_seeds():
    """gu2021-vote-mnist's gap (3.2 points) is below its min_effect of 5, yet it asked for "more seeds"."""
    records = right_first("capsnet", [9320, 9280, 9360], 10000) + right_first("cnn_sabour", [9000, 8960, 9040], 10000)
    j = judge(claim(min_effect=5.0), run(records))
    assert j.verdict == UNRESOLVED and j.needs == BELOW_MIN_EFFECT and "more seeds" not in j.needs


def test_three_seeds_of_the_same_outcomes_count_each_image_once():
    """20 against 35 discordant images in one seed give p = 0.059; the same outcomes in three seeds pooled as
    3 x 1,568 images gave p = 0.0006 (and zero spread p = 0): "refuted". Counted once per image: not resolved."""
    j = judge(claim(), run(discordant(20, 35, 1568, seeds=3)))
    assert j.verdict == UNRESOLVED and "clustered McNemar on 1,568 distinct test images" in j.reason
    assert "p = 0.059" in j.reason


def test_parity_reads_as_easily_as_and_says_who_is_ahead():
    """michels2019-mnist's per-seed differences -14.7, -16.9, -6.51 (capsnet - cnn_sabour) read as "no better
    than" were "supported"; read as the source's parity they are not resolved (TOST p = 0.93), with cnn_sabour ahead
    beyond the margin in every seed, which the row now says."""
    d = [-14.7, -16.9, -6.51]
    records = values("capsnet", [50 + x for x in d]) + values("cnn_sabour", [50.0] * 3)
    j = judge(claim(relation="parity", margin=5.0), run(records))
    t = (np.mean(d) + 5) / (np.std(d, ddof=1) / np.sqrt(3))
    assert j.verdict == UNRESOLVED and j.p == pytest.approx(sps.t.sf(t, 2), rel=1e-9) and round(j.p, 2) == 0.93
    assert "cnn_sabour ahead of capsnet beyond the margin in every seed, by 6.51 to 16.9" in j.reason
    no_better = judge(claim(relation="no_better", margin=5.0), run(records))
    assert no_better.verdict == SUPPORTED and "cnn_sabour ahead of capsnet beyond the margin" in no_better.reason


def test_one_model_measured_two_ways_is_named_by_its_settings_in_the_verdict():
    """marchisio2023-routing's row said "capsnet ahead of capsnet in every seed" of its two CapsNets."""
    from capsbench.reporting.margin_tests import _said

    c = claim(better=Side("capsnet", model_args={"routing_iterations": 3}),
              worse=Side("capsnet", model_args={"routing_iterations": 1}), relation="no_better", margin=5.0)
    assert c.names == ("capsnet (routing_iterations=3)", "capsnet (routing_iterations=1)")
    assert claim().names == ("capsnet", "cnn_sabour")
    metric = next(m for m in SUITES.get("accuracy").metrics if m.name == "test_accuracy")
    text = _said(c, metric, [-3.2, -1.9, -4.9], 0.1, 0.005, None, None)
    assert "(capsnet (routing_iterations=3) - capsnet (routing_iterations=1))" in text
    assert "capsnet (routing_iterations=1) ahead of capsnet (routing_iterations=3) in every seed, by 1.9 to 4.9" in text


def test_margin_claims_honour_one_seed_verdicts():
    """Margin claims ignored one_seed_verdicts=true."""
    records = right_first("capsnet", [9950], 10000) + right_first("cnn_sabour", [9948], 10000)
    alike = claim(relation="no_better", margin=2.0)
    assert judge(alike, run(records)).verdict == UNRESOLVED
    asked = judge(alike, run(records), one_seed=True)
    assert asked.verdict == SUPPORTED and "one_seed_verdicts=true" in asked.reason


def test_exact_counts_follow_the_claimed_relation_and_the_printed_digits():
    """A parity claim on identical parameter counts said "differs"; 6.71 matched a printed 6.8 and 35.31 a
    printed 35.4 (one unit of the last digit either way, where the docs say rounded or truncated)."""
    same = claim("params", "efficiency", better=Side("capsnet", published=6.8), worse=Side("cnn_9x9", published=6.8),
                 sweep={"part": "total"}, relation="parity", margin=0.1)
    records = (values("capsnet", [6.8058] * 3, "params", "efficiency", part="total")
               + values("cnn_9x9", [6.8058] * 3, "params", "efficiency", part="total"))
    judged = judge(same, Run(records_frame(records, SUITES.get("efficiency")), {}, {}, "paper"))
    assert judged.verdict == REPRODUCED and "0 apart, the margin 0.1" in judged.reason
    assert not printed_match(6.71, 6.8) and not printed_match(35.31, 35.4)
    assert printed_match(6.75, 6.8) and printed_match(6.89, 6.8) and printed_match(35.449, 35.4)
    assert printed_match(160.5, 161) and printed_match(161.99, 161) and not printed_match(162.0, 161)


def test_the_noise_band_of_a_protocol_check_counts_distinct_images():
    """98.89 % on three seeds of the same 1,568 images was given the band of 4,704 images (±0.30 points);
    1,568 distinct images give ±0.52 (1.96 binomial standard errors)."""
    checked = claim(checks=(Check("clean accuracy at least 99 %", "at_least", 99.0),))
    rights = [1551, 1550, 1551]  # 98.89 % on average
    j = judge(checked, run(right_first("capsnet", rights, 1568) + right_first("cnn_sabour", [1560] * 3, 1568)))
    assert j.verdict == PROTOCOL_NOT_MET and "within noise (±0.52 points on 1,568 distinct images)" in j.reason
