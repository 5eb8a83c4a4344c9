"""How many paired test images a comparison of two classifiers needs: the power of McNemar's test on the same images,
and the images that reach a target power (Connor, "Sample size for testing differences in proportions for the
paired-sample design", Biometrics 43, 1987: the normal approximation without continuity correction).

Accuracies are fractions in [0, 1]. `delta` is the difference of the two accuracies (p10 - p01: the images only A
gets right minus those only B gets right, as fractions of all images) and `psi` the discordant fraction (p10 + p01)."""

from __future__ import annotations

import math

from scipy import stats as sps

from capsbench.util.stats import ALPHA

POWER = 0.8  # the power a plan sizes its test images for


def independent_discordance(a: float, b: float) -> float:
    """The discordant fraction of two classifiers of accuracies a and b whose errors are independent: a(1-b) +
    b(1-a). Errors of real models overlap (fewer discordant images), so sizing with it errs towards more images."""
    _check_fraction(a, "a")
    _check_fraction(b, "b")
    return a * (1 - b) + b * (1 - a)


def mcnemar_power(n: int, delta: float, psi: float, alpha: float = ALPHA) -> float:
    """The probability that a two-sided McNemar test at level `alpha` on `n` paired images finds a difference
    `delta` when the discordant fraction is `psi` (|delta| <= psi <= 1)."""
    _check_pair(delta, psi)
    if n <= 0 or delta == 0:
        return alpha if delta == 0 else 0.0
    z = sps.norm.ppf(1 - alpha / 2)
    spread = math.sqrt(psi - delta * delta)
    if spread == 0:  # every discordant image goes one way: the test is certain once there are enough of them
        return 1.0 if math.sqrt(n) * abs(delta) > z * math.sqrt(psi) else 0.0
    return float(sps.norm.cdf((math.sqrt(n) * abs(delta) - z * math.sqrt(psi)) / spread))


def mcnemar_images(delta: float, psi: float, power: float = POWER, alpha: float = ALPHA) -> int:
    """The fewest paired images for which a two-sided McNemar test at level `alpha` finds `delta` with `power`."""
    _check_pair(delta, psi)
    if delta == 0:
        raise ValueError("no number of images finds a difference of 0")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    z_a, z_b = sps.norm.ppf(1 - alpha / 2), sps.norm.ppf(power)
    return math.ceil((z_a * math.sqrt(psi) + z_b * math.sqrt(psi - delta * delta)) ** 2 / (delta * delta))


def _check_pair(delta: float, psi: float) -> None:
    if not 0 <= abs(delta) <= psi <= 1:
        raise ValueError(f"need |delta| <= psi <= 1 (a difference within the discordant fraction), got delta={delta}, "
                         f"psi={psi}")


def _check_fraction(value: float, name: str) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be an accuracy as a fraction in [0, 1], got {value}")
