"""Paired tests on per-image outcomes whose unit is the distinct test image. The training seeds of a comparison share
the test draw, so one image's outcomes over the seeds are one observation, not one per seed: each image enters as
k_i = sum over seeds of (a right) - (b right), an integer in [-S, S] for S seeds (Bouthillier et al. 2021,
"Accounting for Variance in Machine Learning Benchmarks", arXiv:2103.03098: images and seeds are two sources of
variance, never pooled as one). With one seed these are McNemar's and Tango's tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

EXACT_BELOW = 25  # discordant images under which the sign-flip distribution is enumerated (McNemar's exact form)


def image_differences(correct_a: Sequence[np.ndarray], correct_b: Sequence[np.ndarray]) -> np.ndarray:
    """k_i per image: the seeds' boolean outcomes of A and B on the same images, summed as (a right) - (b right)."""
    if len(correct_a) != len(correct_b) or not correct_a:
        raise ValueError("paired outcomes need the same seeds on both sides, at least one")
    shapes = {np.shape(x) for x in (*correct_a, *correct_b)}
    if len(shapes) != 1:
        raise ValueError(f"paired outcomes must cover the same images in every seed, got shapes {sorted(shapes)}")
    return sum(np.asarray(a, dtype=int) - np.asarray(b, dtype=int) for a, b in zip(correct_a, correct_b))


def clustered_mcnemar_p(k: np.ndarray) -> float:
    """Two-sided McNemar test for clustered matched pairs (Durkalski et al. 2003, Stat. Med. 22:2417), each image a
    cluster of its seeds' outcome pairs: under H0 the two models are exchangeable on every image, so each k_i is as
    likely as -k_i (a sign flip), and T = sum k_i. Exact (the sign-flip distribution) below 25 discordant images; else
    T^2 / sum k_i^2 on one degree of freedom, with the continuity correction of half T's lattice step. One seed gives
    McNemar's test: the exact binomial, or Edwards' (|b - c| - 1)^2 / (b + c). No discordant image: p = 1."""
    k = np.asarray(k, dtype=int)
    k = k[k != 0]
    if len(k) == 0:
        return 1.0
    t = abs(int(k.sum()))
    if len(k) < EXACT_BELOW:
        return _sign_flip_p(k, t)
    half_step = math.gcd(*np.abs(k).tolist())  # flipping one image moves T by 2 |k_i|: T's lattice step is 2 gcd
    statistic = max(t - half_step, 0) ** 2 / float((k.astype(float) ** 2).sum())
    return float(sps.chi2.sf(statistic, df=1))


def _sign_flip_p(k: np.ndarray, t: int) -> float:
    """P(|T| >= t) when each image's k_i keeps or flips its sign with probability 1/2: the convolution, over each
    magnitude m, of m (2 X_m - c_m), X_m ~ Binomial(c_m, 1/2) for the c_m images of magnitude m."""
    pmf, low = np.ones(1), 0
    for m, c in zip(*np.unique(np.abs(k), return_counts=True)):
        m, c = int(m), int(c)
        part = np.zeros(2 * m * c + 1)
        part[:: 2 * m] = sps.binom.pmf(np.arange(c + 1), c, 0.5)  # values -m c, -m c + 2 m, ..., m c
        pmf, low = np.convolve(pmf, part), low - m * c
    values = low + np.arange(len(pmf))
    return min(1.0, float(pmf[np.abs(values) >= t].sum()))


def tango_p(k: np.ndarray, seeds: int, bound: float, above: bool) -> float:
    """One-sided p-value that the accuracy difference a - b (a fraction) lies above `bound` (above=True) or below it:
    Tango's score test for paired proportions (Tango 1998, Stat. Med. 17:891), whose variance is the restricted
    maximum-likelihood estimate under the bound, so no discordant image shows nothing for certain. The per-image
    means over the seeds, d_i = k_i / S, enter as discordant counts b = sum max(d_i, 0), c = sum max(-d_i, 0) of the
    n distinct images; the binary variance this assumes bounds that of a mean over seeds (|d_i| <= 1), so the test
    is conservative where the seeds disagree on an image. One seed: Tango's test."""
    if not -1 < bound < 1:
        raise ValueError(f"a bound on a difference of accuracies lies in (-1, 1), got {bound}")
    d = np.asarray(k, dtype=float) / seeds
    n, b, c = len(d), float(d[d > 0].sum()), float(-d[d < 0].sum())
    # Restricted MLE of p01 (b's cell is p10 = p01 + bound): the root of 2n x^2 - B x - c bound (1 - bound) = 0.
    big_b = b * (1 + bound) + c * (1 - bound) - 2 * n * bound
    p01 = (big_b + math.sqrt(big_b**2 + 8 * n * c * bound * (1 - bound))) / (4 * n)
    variance = (2 * p01 + bound - bound**2) / n
    if variance <= 0:  # no discordant image and a bound of 0: the difference is the bound, nothing is shown
        return 1.0
    z = ((b - c) / n - bound) / math.sqrt(variance)
    return float(sps.norm.sf(z) if above else sps.norm.cdf(z))


def signed_rank_p(values_a: Sequence[np.ndarray], values_b: Sequence[np.ndarray]) -> float:
    """Two-sided Wilcoxon signed-rank test on per-image values of A and B (e.g. each image's smallest adversarial
    perturbation), each distinct image once: its value averaged over the seeds first. Infinite values (no perturbation
    found within the largest radius tried) rank above every finite one; zero differences are dropped (Wilcoxon's
    treatment); 1.0 where nothing differs."""
    if len(values_a) != len(values_b) or not values_a:
        raise ValueError("paired values need the same seeds on both sides, at least one")
    a, b = (np.mean(np.stack([np.asarray(v, dtype=float) for v in vs]), axis=0) for vs in (values_a, values_b))
    finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)], [0.0]])
    cap = 2.0 * float(np.abs(finite).max()) + 1.0  # above every finite value: the ranks are what counts
    diff = np.where(np.isfinite(a), a, cap) - np.where(np.isfinite(b), b, cap)
    if not np.any(diff != 0):
        return 1.0
    return float(sps.wilcoxon(diff[diff != 0]).pvalue)
