"""Known answers for the uncertainty maths (Wilson intervals, McNemar) and the significance rule for "best"."""

import math

import numpy as np
import pytest

from capsbench.reporting.significance import Cell, best_row
from capsbench.util.stats import (
    accuracy_fields,
    decode_outcomes,
    encode_outcomes,
    error_fields,
    mcnemar_p,
    paired_p,
    wilson_interval,
)


@pytest.mark.parametrize("k, n, low, high", [
    # Newcombe, "Two-sided confidence intervals for the single proportion", Stat. Med. 1998, Table I (Wilson score)
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (29, 29, 0.8830, 1.0),
])
def test_wilson_interval_matches_newcombe(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert (round(lo, 4), round(hi, 4)) == (low, high)


def test_wilson_half_width_at_one_thousand_images_is_about_three_points():
    lo, hi = wilson_interval(500, 1000)
    assert 0.030 < (hi - lo) / 2 < 0.032


def test_mcnemar_exact_for_small_counts():
    # b=1, c=9: two-sided binomial(10, 1/2) tail, 2 * (1 + 10) / 1024
    assert mcnemar_p(1, 9) == pytest.approx(22 / 1024, abs=1e-12)
    assert mcnemar_p(9, 1) == mcnemar_p(1, 9)
    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(5, 5) == 1.0


def test_mcnemar_chi_squared_with_continuity_correction_for_large_counts():
    # b=30, c=10: (|30-10| - 1)^2 / 40 = 9.025 on 1 df; P(chi2_1 > x) = erfc(sqrt(x / 2))
    assert mcnemar_p(30, 10) == pytest.approx(math.erfc(math.sqrt(9.025 / 2)), rel=1e-9)


def test_paired_p_counts_only_discordant_pairs():
    a = np.array([1, 1, 1, 0, 0, 1] * 10, dtype=bool)
    b = np.array([1, 0, 1, 0, 1, 0] * 10, dtype=bool)  # a alone right 20 times, b alone 10
    assert paired_p(a, b) == mcnemar_p(20, 10)
    with pytest.raises(ValueError, match="same items"):
        paired_p(a, b[:-1])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000])
def test_outcomes_round_trip(n):
    flags = np.random.default_rng(n).random(n) < 0.6
    assert np.array_equal(decode_outcomes(encode_outcomes(flags), n), flags)


def test_accuracy_and_error_fields():
    ok = np.array([True] * 81 + [False] * 182)
    acc, err = accuracy_fields(ok), error_fields(ok)
    assert acc["n"] == 263 and acc["value"] == pytest.approx(100 * 81 / 263)
    assert (round(acc["ci_low"], 2), round(acc["ci_high"], 2)) == (25.53, 36.62)
    assert err["value"] == pytest.approx(100 - acc["value"]) and err["ci_low"] == pytest.approx(100 - acc["ci_high"])
    assert err["outcomes"] == acc["outcomes"]


def paired_cells(right_a: int, right_b: int, both: int, n: int = 1000) -> dict[str, Cell]:
    """Two models on the same n images: a alone right on right_a, b alone on right_b, both on `both`."""
    a = np.zeros(n, dtype=bool)
    b = np.zeros(n, dtype=bool)
    a[:both] = b[:both] = True
    a[both : both + right_a] = True
    b[both + right_a : both + right_a + right_b] = True
    return {"a": Cell({0: 100 * a.mean()}, {0: a}), "b": Cell({0: 100 * b.mean()}, {0: b})}


def seeded_cells(leads: list[tuple[int, int]], both: int = 500) -> dict[str, Cell]:
    """Two models over several seeds on the same 1,000 images: per seed (a alone right, b alone right)."""
    a, b = Cell(), Cell()
    for seed, (right_a, right_b) in enumerate(leads):
        one = paired_cells(right_a, right_b, both)
        a.values[seed], a.outcomes[seed] = one["a"].values[0], one["a"].outcomes[0]
        b.values[seed], b.outcomes[seed] = one["b"].values[0], one["b"].outcomes[0]
    return {"a": a, "b": b}


def test_best_only_under_the_seed_rule():
    assert best_row(seeded_cells([(30, 5), (32, 6), (29, 4)]), higher_is_better=True).best == "a"
    inside_noise = best_row(seeded_cells([(12, 8), (11, 9), (13, 8)]), higher_is_better=True)
    assert inside_noise.best is None and inside_noise.test == "seeds" and inside_noise.p > 0.05
    assert best_row(seeded_cells([(5, 30), (4, 31), (6, 29)]), higher_is_better=False).best == "a"  # lower: errors


def test_one_seed_is_never_best_however_large_the_gap_on_its_images():
    verdict = best_row(paired_cells(235, 67, 300), higher_is_better=True)  # McNemar p ~ 1e-22 on these weights
    assert verdict.best is None and verdict.test.startswith("one seed")


def test_a_seed_that_flips_the_direction_leaves_nothing_bold():
    verdict = best_row(seeded_cells([(60, 5), (5, 40)]), higher_is_better=True)
    assert verdict.best is None and verdict.test == "the direction differs between seeds"


def test_ties_and_lonely_models_are_never_best():
    cells = seeded_cells([(10, 10), (10, 10)])
    assert best_row(cells, higher_is_better=True).best is None
    assert best_row({"a": cells["a"]}, higher_is_better=True).best is None


def test_a_seed_that_ties_is_no_lead():
    """Per-seed differences 2.0, 0.0, 2.1, 2.0, 1.9, 2.0 points (20, 0, 21, 20, 19, 20 images of 1,000):
    five leads and a tie are not a lead in every seed."""
    cells = seeded_cells([(20, 0), (0, 0), (21, 0), (20, 0), (19, 0), (20, 0)])
    verdict = best_row(cells, higher_is_better=True)
    assert verdict.best is None and verdict.test == "a seed ties: a zero difference is no lead"


def test_seeds_on_the_same_images_count_each_image_once():
    """Three seeds with the same outcomes: 20 against 35 discordant images of 1,000 in each. Pooled as 3,000 images
    McNemar said p = 0.0006 and bolded b; each image once it is 0.059: nothing is best."""
    cells = seeded_cells([(20, 35)] * 3)
    verdict = best_row(cells, higher_is_better=True)
    assert verdict.best is None and round(verdict.p, 3) == 0.059


def test_undertrained_rows_are_never_best_nor_runner_up():
    ones = np.ones(1000, dtype=bool)
    top = Cell({0: 99.9, 1: 99.9, 2: 99.9}, {0: ones, 1: ones, 2: ones})
    cells = {**seeded_cells([(30, 5), (31, 4), (30, 6)]), "c": top}
    assert best_row(cells, higher_is_better=True).best == "c"
    assert best_row(cells, higher_is_better=True, excluded=frozenset({"c"})).best == "a"


def test_seeds_without_outcomes_use_the_seed_differences_and_exact_counts_need_no_test():
    cells = {"a": Cell({0: 99.0, 1: 99.1, 2: 98.9}), "b": Cell({0: 97.0, 1: 97.2, 2: 96.9})}
    verdict = best_row(cells, higher_is_better=True)
    assert verdict.best == "a" and verdict.test == "seeds"
    unpaired = {"a": Cell({0: 99.0, 1: 99.1, 2: 98.9}), "b": Cell({3: 97.0, 4: 97.2, 5: 96.9})}
    assert best_row(unpaired, higher_is_better=True).test == "welch"
    one_seed = {"a": Cell({0: 1.5}), "b": Cell({0: 2.0})}
    assert best_row(one_seed, higher_is_better=False).best is None
    assert best_row(one_seed, higher_is_better=False, exact=True).best == "a"
