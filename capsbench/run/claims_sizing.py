"""What each claim needs from a run, and no more: test images from a power calculation for the paired comparison it
makes, its training target, the budget its protocol assumes, and the eps values it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capsbench.reporting.claim_files import Claim
from capsbench.suites import SUITES
from capsbench.util.power import POWER, independent_discordance, mcnemar_images

UNKNOWN_DISCORDANCE = 0.5  # without published numbers: two models near 50 % whose errors are independent


@dataclass(frozen=True)
class Need:
    """What one claim asks of its section.

    Args:
        images: test images for the paired comparison (None: the budget's own; capped at the test set).
        images_why: how `images` was sized, in words.
        train: the training of both sides: target_val_accuracy (%) and max_epochs ({} for the budget's schedule).
        budget: the budget its protocol assumes (its `budget` check), or None for any.
        eps: the eps values it reads (robustness claims), empty when it reads none.
    """

    images: int | None
    images_why: str
    train: dict[str, Any] = field(default_factory=dict)
    budget: str | None = None
    eps: tuple[float, ...] = ()


def claim_need(claim: Claim, test_size: int) -> Need:
    """The claim's Need on a dataset of `test_size` test images."""
    budget = next((str(c.value) for c in claim.checks if c.kind == "budget"), None)
    eps = (float(claim.sweep["eps"]),) if "eps" in claim.sweep else ()
    images, why = _images(claim, test_size)
    return Need(images, why, dict(claim.train), budget, eps)


def _images(claim: Claim, test_size: int) -> tuple[int | None, str]:
    """Test images giving the per-seed paired McNemar test POWER at the claim's smallest meaningful difference
    (min_effect, else half the published gap), errors of the two models taken as independent (more discordant images
    than real models have, so more test images than they need); the whole test set when that is not enough."""
    metric = next((m for m in SUITES.get(claim.suite).metrics if m.name == claim.metric), None)
    if metric is None or metric.exact or metric.unit != "%" or claim.ratio is not None:
        return None, "the budget's own (no paired comparison of accuracies)"
    a, b = (_accuracy(s.published, metric.higher_is_better) for s in (claim.better, claim.worse))
    published = None if a is None or b is None else abs(a - b)
    effect = claim.min_effect / 100 if claim.min_effect is not None else None if published is None else published / 2
    if not effect:
        return None, "the budget's own (no published gap and no min_effect to size it by)"
    psi = UNKNOWN_DISCORDANCE if published is None else independent_discordance(a, b)
    n = mcnemar_images(effect, max(psi, effect), POWER)
    said = f"{100 * effect:g}-point" + (" (half the published gap)" if claim.min_effect is None else "")
    why = f"{POWER:.0%} power for a {said} difference in one seed"
    if n >= test_size:
        return test_size, f"the whole test set ({why} would need {n:,})"
    return n, why


def _accuracy(published: float | None, higher_is_better: bool) -> float | None:
    """A published percentage as an accuracy fraction (an error rate counts from the other end)."""
    if published is None:
        return None
    return published / 100 if higher_is_better else 1 - published / 100


def eps_grid(default: list[float], wanted: set[float], blackbox: float | None) -> list[float]:
    """The eps values a robustness section measures: 0 (the clean check), the claims' own, the black-box attack's and
    the largest of the default grid (where the masking checks expect accuracy near 0)."""
    return sorted({0.0, *wanted, max(float(e) for e in default), *([float(blackbox)] if blackbox is not None else [])})
