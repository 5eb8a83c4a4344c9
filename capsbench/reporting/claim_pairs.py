"""One protocol for a pair of models and a metric: every claim on the same two models (as measured: defaults resolved,
training and run settings), dataset, suite and metric, in either direction and with any relation, declares the same
protocol checks and training, and the margin claims among them one margin. A model too small to support "CapsNet is
more robust" is then too small to support "CapsNet is no more robust", and "as robust as" means one difference."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.reporting.baselines import logged_text
from capsbench.reporting.containment import measured


def _model(claim: Any, side: Any) -> tuple[Any, ...]:
    return measured(side, claim.metric, {}, claim.run).instance


def pair(claim: Any) -> tuple[Any, ...]:
    """The pair and metric a claim is about, whichever side it calls better."""
    models = frozenset({_model(claim, claim.better), _model(claim, claim.worse)})
    return claim.suite, claim.dataset, claim.metric, models


def protocol(claim: Any) -> tuple[Any, ...]:
    """What a claim's records must meet, each check's sides named by the models they stand for (its words aside)."""
    checks = frozenset(
        (c.kind, logged_text(c.value), c.metric, tuple(sorted((k, logged_text(v)) for k, v in c.sweep.items())),
         frozenset(_model(claim, getattr(claim, s)) for s in c.sides))
        for c in claim.checks)
    return checks, tuple(sorted(claim.train.items()))


def check_pairs(folder: Path, claims: list[Any]) -> None:
    """Refuse claims on one pair and metric that declare different protocols, or margins."""
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for c in claims:
        groups[pair(c)].append(c)
    for group in groups.values():
        ids = ", ".join(c.id for c in group)
        if len({protocol(c) for c in group}) > 1:
            raise CapsbenchError(
                f"{folder}: claims {ids} compare the same two models on {group[0].metric} ({group[0].dataset}) under "
                "different protocols (checks or train): a claim and its opposite must meet the same checks; give them "
                "the same checks and train")
        margins = {c.margin for c in group if c.margin is not None}
        if len(margins) > 1:
            raise CapsbenchError(
                f"{folder}: claims {ids} compare the same two models on {group[0].metric} with margins "
                f"{', '.join(f'{m:g}' for m in sorted(margins))}: one pair and metric has one margin, with its reason")
