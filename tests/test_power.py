"""Known answers for the test-image power calculation of paired comparisons (McNemar, Connor 1987)."""

import math

import numpy as np
import pytest

from capsbench.util.power import independent_discordance, mcnemar_images, mcnemar_power
from capsbench.util.stats import mcnemar_p


def test_images_for_a_ten_point_difference_in_twenty_points_of_discordance():
    # (1.95996 * sqrt(0.2) + 0.84162 * sqrt(0.19))^2 / 0.01 = 154.6 by hand
    assert mcnemar_images(0.1, 0.2) == 155
    assert mcnemar_power(155, 0.1, 0.2) >= 0.8 > mcnemar_power(154, 0.1, 0.2)


def test_a_large_gap_needs_far_fewer_images_than_a_small_one():
    big = mcnemar_images(0.23, independent_discordance(0.68, 0.45))  # 68 % against 45 %
    small = mcnemar_images(0.0014, independent_discordance(0.9975, 0.9961))  # 0.25 % against 0.39 % error
    assert 50 <= big <= 100 and small > 10_000


def test_power_rises_with_images_and_is_alpha_without_a_difference():
    powers = [mcnemar_power(n, 0.05, 0.2) for n in (50, 200, 800, 3200)]
    assert powers == sorted(powers) and powers[-1] > 0.99
    assert mcnemar_power(100, 0.0, 0.2) == pytest.approx(0.05)


def test_the_planned_images_reach_their_power_in_simulation():
    """At the planned n, McNemar's test as capsbench runs it (exact below 25 discordant pairs, else corrected)
    rejects in about 80 % of simulated comparisons; the normal approximation is at most a few points optimistic."""
    rng = np.random.default_rng(0)
    p10, p01 = 0.15, 0.05  # delta 0.1, psi 0.2
    n = mcnemar_images(p10 - p01, p10 + p01)
    kinds = rng.choice(3, size=(4000, n), p=[p10, p01, 1 - p10 - p01])
    rejected = [mcnemar_p(int((k == 0).sum()), int((k == 1).sum())) < 0.05 for k in kinds]
    assert 0.74 <= np.mean(rejected) <= 0.86


def test_independent_discordance_and_bad_input():
    assert independent_discordance(0.9, 0.8) == pytest.approx(0.9 * 0.2 + 0.8 * 0.1)
    assert math.isclose(independent_discordance(1.0, 1.0), 0.0)
    with pytest.raises(ValueError, match="fraction"):
        independent_discordance(90, 0.8)
    with pytest.raises(ValueError, match="within the discordant fraction"):
        mcnemar_images(0.3, 0.2)
    with pytest.raises(ValueError, match="difference of 0"):
        mcnemar_images(0.0, 0.2)
