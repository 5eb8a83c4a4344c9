"""What one side of a claim contains by construction, so that a claim that cannot fail, or cannot hold, is refused
when the claim files load. Sides are compared as they will be measured: the model with every constructor default
resolved, its training and run settings, its metric and its sweep values (the claim's, overridden by the side's).
On one model, per image, a side counts a superset of the other's correct images when they are the same, or by these
declared relations, chained: the worst case breaks every image any attack breaks and every image broken at a smaller
eps (capsbench.attacks.worst_case); a larger eps contains a smaller one (the L-inf ball); clean accuracy contains
robust accuracy; and each metric's declared `contains` (correct or flagged contains correct)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capsbench.attacks import WORST_CASE
from capsbench.models import MODELS
from capsbench.reporting.baselines import logged_text

CLEAN_CONTAINS = {"clean_accuracy": ("robust_accuracy", "correct_or_detected")}  # correct clean under no attack
ORDERED = ("attack", "eps")  # sweep columns with an order by construction; every other sweep value must be equal


@dataclass(frozen=True)
class Measured:
    """One side as it will be measured."""

    model: str
    model_args: tuple[tuple[str, str], ...]  # every constructor argument, defaults resolved, as MLflow logs it
    training: str | None
    settings: tuple[tuple[str, str], ...]
    metric: str
    sweep: tuple[tuple[str, str], ...]

    @property
    def instance(self) -> tuple[Any, ...]:
        """What makes two sides the same trained model on the same run settings."""
        return self.model, self.model_args, self.training, self.settings


def measured(side: Any, metric: str, sweep: dict[str, Any], run: dict[str, Any]) -> Measured:
    """`side` (a claim_files.Side) measured on `metric` at `sweep` (the claim's values, the side's over them) with the
    claim's `run` settings under the side's."""
    args = {**(MODELS.get(side.model).arguments() if side.model in MODELS else {}), **side.model_args}
    return Measured(side.model, _items(args), side.training, _items({**run, **side.settings}), side.metric or metric,
                    _items({**sweep, **side.sweep}))


def _items(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, logged_text(v)) for k, v in values.items()))


def at_least(x: Measured, y: Measured, contains: dict[str, tuple[str, ...]]) -> bool:
    """Whether `x` counts, on every image, every image `y` counts as correct (its value is at least `y`'s) by
    construction; `contains` maps a metric to those it contains (the suite's declarations)."""
    if x.instance != y.instance:
        return False
    if x == y:
        return True
    if x.metric in CLEAN_CONTAINS and y.metric in CLEAN_CONTAINS[x.metric]:
        return True  # clean accuracy has no attack or eps: it contains every attacked one
    if x.metric != y.metric and y.metric not in contains.get(x.metric, ()):
        return False
    xs, ys = dict(x.sweep), dict(y.sweep)
    if {k: v for k, v in xs.items() if k not in ORDERED} != {k: v for k, v in ys.items() if k not in ORDERED}:
        return False
    attack_x, attack_y = xs.get("attack"), ys.get("attack")
    if attack_x != attack_y and (attack_y != WORST_CASE or attack_x is None):
        return False  # only the worst case lies below an attack
    if (xs.get("eps") is None) != (ys.get("eps") is None):
        return False
    return xs.get("eps") is None or float(xs["eps"]) <= float(ys["eps"])
