"""Known answers for the tests over training seeds: scipy's t-tests where the seeds spread, the floor of one image in n
where they tie, and no certainty from a tie with no resolution known (cases the rule once got wrong)."""

import math

import pytest
from scipy import stats as sps

from capsbench.util.seed_tests import beyond_margin_p, mean_interval, seed_differences_p, spread, welch_p

STEP = 100 / 1568  # one image of the claims' 1,568-image draw, in points


def test_spread_seeds_match_scipy():
    d = [2.0, 1.2, 2.9, 1.7]
    assert seed_differences_p(d) == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-12)
    assert seed_differences_p(d, bound=1.0) == pytest.approx(sps.ttest_1samp(d, 1.0).pvalue, rel=1e-12)
    assert beyond_margin_p(d, 1.0, above=True) == pytest.approx(
        sps.ttest_1samp(d, 1.0, alternative="greater").pvalue, rel=1e-12)
    assert beyond_margin_p(d, 3.0, above=False) == pytest.approx(
        sps.ttest_1samp(d, 3.0, alternative="less").pvalue, rel=1e-12)
    assert welch_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.02131, abs=5e-5)  # t = -3.674, df = 4
    assert seed_differences_p(d, resolution=STEP) == seed_differences_p(d)  # a real spread is above the floor


def test_a_tie_between_seeds_is_no_certainty():
    """seed_differences_p([0.1, 0.1]) was 0.0."""
    assert seed_differences_p([0.1, 0.1]) == 1.0  # no spread and no resolution: nothing to test with
    assert seed_differences_p([0.1, 0.1 + 1e-15]) == 1.0  # float rounding is no spread
    # one image of 1,568 as the spread: t = 0.1 / (0.0638 / sqrt 2) = 2.217 on 1 df
    t = 0.1 / (STEP / math.sqrt(2))
    assert seed_differences_p([0.1, 0.1], resolution=STEP) == pytest.approx(2 * sps.t.sf(t, 1), rel=1e-12)
    assert seed_differences_p([0.1, 0.1], resolution=STEP) > 0.05
    assert welch_p([1, 1], [2, 2]) == 1.0 and welch_p([1, 1], [1, 1]) == 1.0
    # with the floor a 1-point gap is t = 1 / sqrt(STEP^2 / 2 + STEP^2 / 2) = 15.7 on 2 df (Welch-Satterthwaite)
    assert welch_p([1, 1], [2, 2], resolution=STEP) == pytest.approx(2 * sps.t.sf(1 / STEP, 2), rel=1e-9)


def test_two_seeds_at_4_9_against_a_margin_of_5_show_nothing():
    """Two seeds at exactly +4.9 against a margin of 5 gave p = 1.1e-14 (the spread was float rounding)."""
    d = [99.0 - 94.1, 98.5 - 93.6]  # +4.9 twice, up to float rounding
    assert beyond_margin_p(d, 5.0, above=False) == 1.0
    p = beyond_margin_p(d, 5.0, above=False, resolution=STEP)
    assert p == pytest.approx(sps.t.cdf(-0.1 / (STEP / math.sqrt(2)), 1), rel=1e-6) and p > 0.1  # 0.135


def test_the_interval_of_a_mean():
    d = [2.0, 1.2, 2.9, 1.7]
    low, high = mean_interval(d, 0.95)
    half = sps.t.ppf(0.975, 3) * sps.tstd(d) / 2
    assert (low, high) == pytest.approx((sum(d) / 4 - half, sum(d) / 4 + half), rel=1e-12)
    assert mean_interval([3.0, 3.0], 0.95) is None
    low, high = mean_interval([3.0, 3.0], 0.90, resolution=STEP)
    assert high - 3.0 == pytest.approx(sps.t.ppf(0.95, 1) * STEP / math.sqrt(2))
    assert spread([3.0, 3.0], STEP) == STEP and spread([1.0, 3.0]) == pytest.approx(math.sqrt(2))
