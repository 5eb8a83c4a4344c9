"""Tests over training seeds (one value per seed): Student's t on per-seed differences, its one-sided form against a
margin, Welch's t between unpaired seeds, and the t interval of a mean. A measurement moves in steps (an accuracy on n
images in steps of one image, 100 / n points), so seeds that agree to the step do not show a spread of zero: the
standard deviation is floored at that `resolution`, and values that agree with no resolution known (float rounding
aside) give no test at all (p = 1), never p = 0."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

FLOAT_SPREAD = 1e-9  # a spread below this share of the values' size is float rounding, not a spread


def spread(values: Sequence[float], resolution: float = 0.0) -> float:
    """The sample standard deviation (ddof=1), floored at `resolution`; 0.0 when the values agree to float rounding
    and no resolution is given."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        raise ValueError("a spread between seeds needs at least two seeds")
    sd = float(v.std(ddof=1))
    if sd <= FLOAT_SPREAD * max(1.0, float(np.abs(v).max())):
        sd = 0.0
    return max(sd, resolution)


def _t(values: Sequence[float], bound: float, resolution: float) -> tuple[float, int] | None:
    """(t, df) of the mean of `values` against `bound` with the floored spread; None without a spread."""
    sd = spread(values, resolution)
    if sd == 0:
        return None
    return (float(np.mean(values)) - bound) / (sd / math.sqrt(len(values))), len(values) - 1


def seed_differences_p(differences: Sequence[float], resolution: float = 0.0, bound: float = 0.0) -> float:
    """Two-sided one-sample t-test p-value that the mean of per-seed differences (A - B, one per training seed) is
    `bound` (Student 1908): the test whose spread is the variance between training seeds. Needs >= 2."""
    found = _t(differences, bound, resolution)
    if found is None:
        return 1.0
    t, df = found
    return float(2 * sps.t.sf(abs(t), df))


def beyond_margin_p(differences: Sequence[float], bound: float, above: bool, resolution: float = 0.0) -> float:
    """One-sided t-test p-value that the mean of per-seed differences lies above `bound` (above=True) or below it: a
    margin test's one side; two of them at -margin and +margin are the two one-sided tests of equivalence
    (Schuirmann 1987). Needs >= 2."""
    found = _t(differences, bound, resolution)
    if found is None:
        return 1.0
    t, df = found
    return float(sps.t.sf(t, df) if above else sps.t.cdf(t, df))


def mean_interval(values: Sequence[float], confidence: float, resolution: float = 0.0) -> tuple[float, float] | None:
    """The t interval of the mean of per-seed values at `confidence` (two-sided), with the floored spread; None
    without a spread."""
    sd = spread(values, resolution)
    if sd == 0:
        return None
    mean, half = float(np.mean(values)), float(sps.t.ppf(0.5 + confidence / 2, len(values) - 1)) * sd
    return mean - half / math.sqrt(len(values)), mean + half / math.sqrt(len(values))


def welch_p(a: Sequence[float], b: Sequence[float], resolution: float = 0.0, bound: float = 0.0) -> float:
    """Two-sided Welch t-test p-value (Welch 1947) that mean(a) - mean(b) is `bound`, for per-seed values measured on
    different seeds (>= 2 of each), each spread floored at `resolution`; 1.0 when neither side has a spread."""
    sa, sb = spread(a, resolution), spread(b, resolution)
    if sa == 0 and sb == 0:
        return 1.0
    result = sps.ttest_ind_from_stats(float(np.mean(a)) - bound, sa, len(a), float(np.mean(b)), sb, len(b),
                                      equal_var=False)
    return float(result.pvalue)
