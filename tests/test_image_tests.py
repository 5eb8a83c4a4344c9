"""Known answers for the per-image tests: one seed is McNemar's and Tango's test; the same outcomes in three seeds are
still one observation per image (20 against 35 discordant images); Tango's restricted estimate checked
against a numerical maximum-likelihood fit; no discordant image is never certainty."""

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps

from capsbench.util.image_tests import clustered_mcnemar_p, image_differences, tango_p
from capsbench.util.stats import mcnemar_p


def outcomes(only_a: int, only_b: int, both: int = 100, neither: int = 10) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([1] * only_a + [0] * only_b + [1] * both + [0] * neither, dtype=bool)
    b = np.array([0] * only_a + [1] * only_b + [1] * both + [0] * neither, dtype=bool)
    return a, b


def test_one_seed_is_mcnemar():
    for only_a, only_b in ((20, 35), (1, 9), (30, 10), (12, 0)):
        a, b = outcomes(only_a, only_b)
        assert clustered_mcnemar_p(image_differences([a], [b])) == pytest.approx(mcnemar_p(only_a, only_b), rel=1e-12)
    same_a, same_b = outcomes(0, 0)
    assert clustered_mcnemar_p(image_differences([same_a], [same_b])) == 1.0


def test_three_seeds_of_the_same_outcomes_are_one_observation_per_image():
    """One seed at 20 against 35 discordant images gives p = 0.059; the same outcomes in three seeds pooled
    as 3 x n images gave p = 0.0006. Counted once per image, they give 0.059 again."""
    a, b = outcomes(20, 35)
    one = clustered_mcnemar_p(image_differences([a], [b]))
    three = clustered_mcnemar_p(image_differences([a, a, a], [b, b, b]))
    assert round(one, 3) == 0.059 and three == pytest.approx(one, rel=1e-12)
    assert round(mcnemar_p(60, 105), 4) == 0.0006  # what pooling the three seeds as independent images said


def test_clustered_statistic_by_hand():
    """Seeds that disagree on some images: k = +3 on 20 images, +1 on 30, -2 on 25, -1 on 5 (80 discordant images):
    T = 60 + 30 - 50 - 5 = 35, sum k^2 = 180 + 30 + 100 + 5 = 315, half the lattice step gcd(3, 1, 2, 1) = 1."""
    k = np.array([3] * 20 + [1] * 30 + [-2] * 25 + [-1] * 5 + [0] * 50)
    assert clustered_mcnemar_p(k) == pytest.approx(sps.chi2.sf(34**2 / 315, 1), rel=1e-12)


def test_small_clusters_use_the_exact_sign_flip_distribution():
    """k = (2, 2, 1): T = 5; the 8 equally likely sign patterns give T in {5, 3, 1, -1, 1, -1, -3, -5}: P(|T| >= 5)
    = 2 / 8."""
    assert clustered_mcnemar_p(np.array([2, 2, 1, 0, 0])) == pytest.approx(0.25)
    assert clustered_mcnemar_p(np.array([1, 1, 1, 1, 1])) == pytest.approx(2 / 32)  # McNemar's exact: 2 (1/2)^5


def restricted_p01(b: float, c: float, n: int, bound: float) -> float:
    """The maximum-likelihood p01 of the paired 2x2 table under p10 - p01 = bound, found numerically."""
    def minus_loglik(x: float) -> float:
        terms = ((b, x + bound), (c, x), (n - b - c, 1 - 2 * x - bound))
        return -sum(count * math.log(p) for count, p in terms if count)
    low, high = max(0.0, -bound) + 1e-12, (1 - bound) / 2 - 1e-12
    return optimize.minimize_scalar(minus_loglik, bounds=(low, high), method="bounded",
                                    options={"xatol": 1e-14}).x


@pytest.mark.parametrize("b, c, n, bound", [(20, 35, 1568, 0.05), (35, 20, 1568, -0.05), (10, 3, 100, 0.02),
                                            (3, 10, 100, -0.1), (50, 5, 200, 0.3)])
def test_tango_score_test_matches_the_numerical_restricted_fit(b, c, n, bound):
    x = restricted_p01(b, c, n, bound)
    z = ((b - c) / n - bound) / math.sqrt((2 * x + bound - bound**2) / n)
    k = np.array([1] * b + [-1] * c + [0] * (n - b - c))
    assert tango_p(k, 1, bound, above=True) == pytest.approx(sps.norm.sf(z), rel=1e-6)
    assert tango_p(k, 1, bound, above=False) == pytest.approx(sps.norm.cdf(z), rel=1e-6)


def test_tango_at_a_bound_of_zero_is_the_mcnemar_score():
    k = np.array([1] * 30 + [-1] * 10 + [0] * 60)
    assert tango_p(k, 1, 0.0, above=True) == pytest.approx(sps.norm.sf(20 / math.sqrt(40)), rel=1e-12)


def test_no_discordant_image_is_no_certainty():
    """The Wald variance gave p = 0 with no discordant pair, even on 3 images. Tango's restricted variance at
    a bound of 0.05 is 0.05 x 0.95 / 3: z = -0.05 / 0.1258, p = 0.35."""
    k = np.zeros(3, dtype=int)
    assert tango_p(k, 1, 0.05, above=False) == pytest.approx(sps.norm.cdf(-0.05 / math.sqrt(0.05 * 0.95 / 3)))
    assert tango_p(k, 1, 0.05, above=False) > 0.3 and tango_p(k, 1, 0.0, above=True) == 1.0


def test_seeds_that_agree_are_counted_once_in_the_margin_test():
    a, b = outcomes(20, 35, both=1400, neither=113)
    one = tango_p(image_differences([a], [b]), 1, 0.02, above=False)
    assert tango_p(image_differences([a] * 3, [b] * 3), 3, 0.02, above=False) == pytest.approx(one, rel=1e-12)
    with pytest.raises(ValueError, match="same images"):
        image_differences([a, a], [b, b[:-1]])
