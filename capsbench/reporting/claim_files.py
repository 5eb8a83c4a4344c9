"""Published claims from baselines/claims/*.yaml ("model A beats model B on metric M"): schema validation only;
reporting/verdicts.py computes their verdicts from records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.reporting.baselines import NAME, baselines_dir, check_mapping, read_sourced_list
from capsbench.suites import SUITES

_CLAIM_KEYS = {
    "id": str, "statement": str, "where": str, "suite": str, "dataset": str, "metric": str, "better": dict,
    "worse": dict, "sweep": dict, "ratio": (int, float), "note": str,
}
_REQUIRED_CLAIM = ("id", "statement", "where", "suite", "dataset", "metric", "better", "worse")
_SIDE_KEYS = {"model": str, "published": (int, float), "model_args": dict, "settings": dict, "training": str,
              "metric": str}


@dataclass(frozen=True)
class Side:
    """One model of a claim: its name, the published number, the constructor arguments (model_args) and run
    settings (e.g. data.max_shift) the measured model must have to stand for it, its training protocol (`pgd`,
    `affine`: the records' `training` column; none for standard training), and the metric read for this side
    when it is not the claim's (e.g. `correct_or_detected` for a model defended by a detector)."""

    model: str
    published: float | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    training: str | None = None
    metric: str | None = None

    @property
    def label(self) -> str:
        extra = {**self.model_args, **self.settings, **({"training": self.training} if self.training else {})}
        name = self.model + (f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else "")
        return name + (f" [{self.metric}]" if self.metric else "")


@dataclass(frozen=True)
class Claim:
    """`better` beats `worse` on `metric` (direction from the metric's higher_is_better) at the `sweep` values;
    with `ratio`, by at least that factor (e.g. "about 10x slower")."""

    id: str
    statement: str
    source: str  # citation with its arXiv / OpenReview / URL reference
    where: str
    suite: str
    dataset: str
    metric: str
    better: Side
    worse: Side
    sweep: dict[str, Any] = field(default_factory=dict)
    ratio: float | None = None
    note: str = ""


def load_claims(directory: Path | None = None) -> list[Claim]:
    """Every claim of every <baselines>/claims/*.yaml, validated; none when the folder is absent."""
    folder = (directory or baselines_dir()) / "claims"
    claims = [c for path in sorted(folder.glob("*.yaml")) for c in load_claims_file(path)]
    seen: set[str] = set()
    for c in claims:
        if c.id in seen:
            raise CapsbenchError(f"{folder}: claim id {c.id!r} appears twice; give every claim its own id")
        seen.add(c.id)
    return claims


def load_claims_file(path: Path) -> list[Claim]:
    """The validated claims of one claims YAML file."""
    source, claims = read_sourced_list(path, "claims")
    return [_claim(path, f"claims[{i}]", raw, source) for i, raw in enumerate(claims)]


def _claim(path: Path, where: str, raw: Any, source: str) -> Claim:
    entry = check_mapping(path, where, raw, _CLAIM_KEYS, _REQUIRED_CLAIM)
    for key in ("suite", "dataset", "metric"):
        if not NAME.match(entry[key]):
            raise CapsbenchError(
                f"{path}: '{where}.{key}' = {entry[key]!r} may use only letters, digits, '_ - . / space'"
            )
    ratio = entry.get("ratio")
    if ratio is not None and not (math.isfinite(ratio) and ratio > 1):
        raise CapsbenchError(f"{path}: '{where}.ratio' must be a number above 1 (the claimed factor), got {ratio!r}")
    sides = [_side(path, f"{where}.{name}", entry[name]) for name in ("better", "worse")]
    _check_metric(path, where, entry)
    return Claim(
        id=entry["id"],
        statement=entry["statement"],
        source=source,
        where=entry["where"],
        suite=entry["suite"],
        dataset=entry["dataset"],
        metric=entry["metric"],
        better=sides[0],
        worse=sides[1],
        sweep=dict(entry.get("sweep", {})),
        ratio=None if ratio is None else float(ratio),
        note=entry.get("note", ""),
    )


def _side(path: Path, where: str, raw: Any) -> Side:
    side = check_mapping(path, where, raw, _SIDE_KEYS, ("model",))
    return Side(
        side["model"],
        None if "published" not in side else float(side["published"]),
        dict(side.get("model_args", {})),
        dict(side.get("settings", {})),
        side.get("training"),
        side.get("metric"),
    )


def _check_metric(path: Path, where: str, entry: dict[str, Any]) -> None:
    """Claims on a suite this install defines must name one of its metrics with a direction, and its sweep columns."""
    if entry["suite"] not in SUITES:
        return  # a suite from a later version: kept; its verdict says the suite is missing
    suite = SUITES.get(entry["suite"])
    direction = {m.name: m.higher_is_better for m in suite.metrics if m.higher_is_better is not None}
    if entry["metric"] not in direction:
        raise CapsbenchError(
            f"{path}: '{where}.metric' = {entry['metric']!r} is not a metric of suite "
            f"{entry['suite']!r} with a direction; expected one of: {', '.join(direction)}"
        )
    for name in ("better", "worse"):
        own = entry[name].get("metric")
        if own is not None and direction.get(own) != direction[entry["metric"]]:
            same = [m for m, up in direction.items() if up == direction[entry["metric"]]]
            raise CapsbenchError(
                f"{path}: '{where}.{name}.metric' = {own!r} must be a metric of suite "
                f"{entry['suite']!r} with the direction of {entry['metric']!r}; expected one of: "
                f"{', '.join(same)}"
            )
    for col in entry.get("sweep", {}):
        if col not in suite.sweep_columns:
            raise CapsbenchError(
                f"{path}: '{where}.sweep.{col}' is not a sweep column of suite {entry['suite']!r}; "
                f"expected one of: {', '.join(suite.sweep_columns) or '(none)'}"
            )
