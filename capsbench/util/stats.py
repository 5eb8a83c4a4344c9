"""Uncertainty of measured accuracies: Wilson intervals, paired McNemar tests, Welch's t-test across seeds, the t-test
on per-seed differences, and a compact encoding of per-image outcomes so that paired tests can be run from tidy
records."""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05  # significance level of every "best" claim
MCNEMAR_EXACT_BELOW = 25  # discordant pairs under which McNemar's exact binomial form is used


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion, as fractions in [0, 1] (Wilson 1927; Newcombe 1998): scipy's
    binomtest(...).proportion_ci(method="wilson"), exact at 0 and n."""
    if n <= 0:
        raise ValueError(f"a proportion needs n >= 1 trials, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n={n}], got {successes}")
    ci = sps.binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    low = 0.0 if successes == 0 else max(0.0, float(ci.low))  # exact at the ends, where rounding would miss 0 or 1
    high = 1.0 if successes == n else min(1.0, float(ci.high))
    return low, high


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided McNemar p-value from the discordant counts (A right and B wrong; B right and A wrong).

    Exact binomial test (scipy's binomtest at p = 1/2) when there are fewer than 25 discordant pairs, otherwise the
    chi-squared statistic with Edwards' continuity correction, (|b - c| - 1)^2 / (b + c) on one degree of freedom."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    total = only_a + only_b
    if total == 0:
        return 1.0
    if total < MCNEMAR_EXACT_BELOW:
        return float(sps.binomtest(only_a, total, 0.5).pvalue)
    statistic = (abs(only_a - only_b) - 1.0) ** 2 / total
    return float(sps.chi2.sf(statistic, df=1))


def paired_p(correct_a: np.ndarray, correct_b: np.ndarray) -> float:
    """McNemar p-value for two classifiers judged on the same items: boolean arrays of equal length."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must cover the same items, got {a.shape} and {b.shape}")
    return mcnemar_p(int((a & ~b).sum()), int((b & ~a).sum()))


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t-test p-value between two sets of per-seed values (needs >= 2 of each); 1.0 when
    both sets are constant and equal, 0.0 when both are constant and differ."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2:
        raise ValueError("Welch's t-test needs at least two seeds per model")
    if x.std() == 0 and y.std() == 0:
        return 1.0 if x.mean() == y.mean() else 0.0
    return float(sps.ttest_ind(x, y, equal_var=False).pvalue)


def seed_differences_p(differences: Sequence[float]) -> float:
    """Two-sided one-sample t-test p-value that the mean of per-seed differences (model A - model B, one per training
    seed) is 0: the test on paired differences, whose spread is the variance between training seeds. Needs >= 2;
    1.0 when every difference is 0, 0.0 when they are all equal and nonzero."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        raise ValueError("a test on per-seed differences needs at least two seeds")
    if d.std() == 0:
        return 1.0 if d.mean() == 0 else 0.0
    return float(sps.ttest_1samp(d, 0.0).pvalue)


def encode_outcomes(correct: np.ndarray) -> str:
    """Per-item booleans as URL-safe base64 of their packed bits (8 items a byte, first item in the high bit)."""
    bits = np.packbits(np.asarray(correct, dtype=bool))
    return base64.urlsafe_b64encode(bits.tobytes()).decode("ascii")


def decode_outcomes(text: str, n: int) -> np.ndarray:
    """The inverse of encode_outcomes for n items."""
    raw = np.frombuffer(base64.urlsafe_b64decode(text.encode("ascii")), dtype=np.uint8)
    if len(raw) != (n + 7) // 8:
        raise ValueError(f"outcomes hold {len(raw) * 8} bits, which cannot encode n={n} items")
    return np.unpackbits(raw)[:n].astype(bool)


def accuracy_fields(correct: np.ndarray) -> dict[str, float | int | str]:
    """The uncertainty columns of an accuracy record (value in %): value, n, ci_low, ci_high, outcomes."""
    flags = np.asarray(correct, dtype=bool).ravel()
    n, k = len(flags), int(flags.sum())
    low, high = wilson_interval(k, n)
    return {"value": 100.0 * k / n, "n": n, "ci_low": 100.0 * low, "ci_high": 100.0 * high,
            "outcomes": encode_outcomes(flags)}


def error_fields(correct: np.ndarray) -> dict[str, float | int | str]:
    """The same columns for the error rate (100 - accuracy); outcomes stay per-item correctness."""
    acc = accuracy_fields(correct)
    return {**acc, "value": 100.0 - acc["value"], "ci_low": 100.0 - acc["ci_high"], "ci_high": 100.0 - acc["ci_low"]}


def beyond_margin_p(differences: Sequence[float], bound: float, above: bool) -> float:
    """One-sided t-test p-value, over per-seed differences, that their mean lies above `bound` (above=True) or below
    it: a margin test's one side (two of them at -margin and +margin are the two one-sided tests of equivalence,
    Schuirmann 1987). Needs >= 2; with no spread, 0.0 when every difference is on the tested side, else 1.0."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        raise ValueError("a margin test over seeds needs at least two seeds")
    if d.std() == 0:
        return 0.0 if (d[0] > bound if above else d[0] < bound) else 1.0
    return float(sps.ttest_1samp(d, bound, alternative="greater" if above else "less").pvalue)


def paired_beyond_margin_p(correct_a: np.ndarray, correct_b: np.ndarray, bound: float, above: bool) -> float:
    """One-sided z-test p-value, on paired per-image outcomes, that the accuracy difference a - b (a fraction) lies
    above `bound` (or below it): the paired-proportions test with the variance of the discordant pairs (Tango 1998,
    Wald form); 1.0 (nothing shown) when no pair is discordant and the bound is not already passed."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    n, only_a, only_b = len(a), int((a & ~b).sum()), int((b & ~a).sum())
    diff = (only_a - only_b) / n
    var = (only_a + only_b - (only_a - only_b) ** 2 / n) / n**2
    if var <= 0:
        return 0.0 if (diff > bound if above else diff < bound) else 1.0
    z = (diff - bound) / math.sqrt(var)
    return float(sps.norm.sf(z) if above else sps.norm.cdf(z))
