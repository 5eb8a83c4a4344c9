"""Uncertainty of measured accuracies: Wilson intervals, paired McNemar tests on one seed's images, and a compact
encoding of per-image outcomes so that paired tests can be run from tidy records (tests over seeds:
capsbench.util.seed_tests; per-image tests over several seeds: capsbench.util.image_tests)."""

from __future__ import annotations

import base64

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


def encode_values(values: np.ndarray) -> str:
    """Per-item numbers (float32; inf allowed) as URL-safe base64 of their bytes, little-endian."""
    return base64.urlsafe_b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def decode_values(text: str, n: int) -> np.ndarray:
    """The inverse of encode_values for n items."""
    raw = np.frombuffer(base64.urlsafe_b64decode(text.encode("ascii")), dtype="<f4")
    if len(raw) != n:
        raise ValueError(f"values hold {len(raw)} numbers, not n={n}")
    return raw.astype(float)


def median_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of `values` (inf allowed): the order statistics
    x(k), x(n-k+1) with k the largest index whose binomial(n, 1/2) tail stays within (1 - confidence) / 2 (Conover,
    "Practical Nonparametric Statistics", sec. 3.2)."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("the median of no values has no interval")
    k = int(sps.binom.ppf((1 - confidence) / 2, n, 0.5))  # P(B <= k - 1) <= alpha / 2
    while k > 0 and sps.binom.cdf(k - 1, n, 0.5) > (1 - confidence) / 2:
        k -= 1
    if k == 0:
        return float(x[0]), float(x[-1])
    return float(x[k - 1]), float(x[n - k])


def distance_fields(distances: np.ndarray) -> dict[str, float | int | str]:
    """The record columns of a per-image distance: the median (value), n, its distribution-free 95 % interval and the
    per-image distances themselves (`per_image`, for paired tests across models)."""
    d = np.asarray(distances, dtype=float)
    low, high = median_interval(d)
    return {"value": float(np.median(d)), "n": len(d), "ci_low": low, "ci_high": high, "per_image": encode_values(d)}

