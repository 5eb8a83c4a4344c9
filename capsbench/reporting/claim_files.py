"""Published claims from baselines/claims/*.yaml ("model A beats model B on metric M", under the protocol its
`checks` declare): schema validation only; reporting/verdicts.py computes their verdicts from records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsbench.data.files import DATA_FILES
from capsbench.errors import CapsbenchError
from capsbench.reporting.baselines import NAME, baselines_dir, check_mapping, check_sweep_columns, read_sourced_list
from capsbench.reporting.claim_pairs import check_pairs
from capsbench.reporting.containment import Measured, at_least, measured
from capsbench.suites import SUITES

KINDS = {  # kind -> (type of its value, what a run needs to meet it when the check does not say)
    "at_least": ((int, float), "budget=paper (models trained as long as the paper's)"),
    "at_most": ((int, float), "budget=paper (models trained as long as the paper's)"),
    "near_published": ((int, float), "budget=paper (models trained as long as the paper's)"),
    "budget": (str, "budget=paper"),
    "model": (str, "the source's model, which capsbench does not build"),
}
_KEYS = {"what", "sides", "metric", "sweep", "needs", *KINDS}
SIDES = ("better", "worse")


@dataclass(frozen=True)
class Check:
    """One assumption: `kind` (at_least / at_most a value of `metric`, the mean over seeds; near_published: within
    `value` of the side's published number on the claim's metric; budget: the run's budget is `value`; model: the
    side's model is the registered model `value`, the source's, so that another model never stands for it), for each
    of `sides`; `what` says it in words, `needs` what a run needs to meet it (default: by kind, KINDS)."""

    what: str
    kind: str
    value: Any
    sides: tuple[str, ...] = SIDES
    metric: str | None = None  # default: the claim's metric (at the claim's sweep values)
    sweep: dict[str, Any] = field(default_factory=dict)
    needs: str = ""


CLAIMS_SUITE = "claims"  # `capsbench run suite=claims` (the MLflow tag of its parent run): plans what claims need
_CLAIM_KEYS = {
    "id": str, "statement": str, "where": str, "suite": str, "dataset": str, "metric": str, "better": dict,
    "worse": dict, "sweep": dict, "ratio": (int, float), "note": str, "checks": list, "data": list, "run": dict,
    "min_effect": (int, float), "train": dict, "relation": str, "margin": (int, float),
}
# beats: `better` is better than `worse`; parity: neither is better by `margin` or more (an equivalence test);
# no_better: `better` is not better than `worse` by `margin` or more ("fooled as easily as")
RELATIONS = ("beats", "parity", "no_better")
_TRAIN_KEYS = {"target_val_accuracy": (int, float), "max_epochs": int}  # a claim's training: to a target, capped
_REQUIRED_CLAIM = ("id", "statement", "where", "suite", "dataset", "metric", "better", "worse")
# sweep values a run can measure, by column: (test, what is expected)
SWEEP_VALUES = {"eps": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1,
                        "an L-inf radius in [0, 1] (pixels in [0, 1]), e.g. 0.1")}
_SIDE_KEYS = {"model": str, "published": (int, float), "model_args": dict, "settings": dict, "training": str,
              "metric": str, "sweep": dict}


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
    sweep: dict[str, Any] = field(default_factory=dict)  # over the claim's: e.g. the attack this side is measured under

    @property
    def label(self) -> str:
        extra = {**self.model_args, **self.settings, **({"training": self.training} if self.training else {})}
        name = self.model + (f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else "")
        measured = ", ".join([*([self.metric] if self.metric else []), *(f"{k}={v}" for k, v in self.sweep.items())])
        return name + (f" [{measured}]" if measured else "")


@dataclass(frozen=True)
class Claim:
    """`better` beats `worse` on `metric` (direction from the metric's higher_is_better) at the `sweep` values;
    with `ratio`, by at least that factor (e.g. "about 10x slower"). `checks`: what the published numbers assume;
    `data`: data sources it needs beyond its dataset (e.g. affnist); `run`: settings its runs need (e.g.
    params.detection_fpr), in the records' settings as logged."""

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
    checks: tuple[Check, ...] = ()
    data: tuple[str, ...] = ()
    run: dict[str, Any] = field(default_factory=dict)
    unsourced: str | None = None  # numbers no paper prints: what they are instead (None: a primary source)
    min_effect: float | None = None  # beats: the smallest difference (metric units) that carries the statement, the
    # threshold of "supported" (the source's "far more", "much smaller"); also what the test images are sized for
    train: dict[str, Any] = field(default_factory=dict)  # target_val_accuracy (%) and max_epochs of both sides
    relation: str = "beats"  # or parity / no_better, tested against `margin` (RELATIONS)
    margin: float | None = None  # parity and no_better: the difference (metric units) that would contradict them
    origin: str = ""  # its file and id, as errors name it

    @property
    def primary(self) -> bool:
        """Whether a paper prints the claim's numbers (else they are kept apart and never called a paper's)."""
        return self.unsourced is None

    @property
    def names(self) -> tuple[str, str]:
        """How a verdict's words name the better and the worse side: their models, or their whole labels where both
        sides are one model measured two ways ("capsnet ahead of capsnet" said nothing)."""
        a, b = self.better, self.worse
        return (a.model, b.model) if a.model != b.model else (a.label, b.label)


def load_claims(directory: Path | None = None) -> list[Claim]:
    """Every claim of every <baselines>/claims/*.yaml, validated (claims on one pair and metric under one protocol:
    reporting/claim_pairs.py); none when the folder is absent."""
    folder = (directory or baselines_dir()) / "claims"
    claims = [c for path in sorted(folder.glob("*.yaml")) for c in load_claims_file(path)]
    seen: set[str] = set()
    for c in claims:
        if c.id in seen:
            raise CapsbenchError(f"{folder}: claim id {c.id!r} appears twice; give every claim its own id")
        seen.add(c.id)
    check_pairs(folder, claims)
    return claims


def claim_ids(directory: Path | None = None) -> list[str]:
    """The ids of every claim under <baselines>/claims/, read without validating (nor importing the suites, torch)."""
    folder = (directory or baselines_dir()) / "claims"
    ids = []
    for path in sorted(folder.glob("*.yaml")):
        for i, c in enumerate(read_sourced_list(path, "claims").entries):
            if isinstance(c, dict):
                if not isinstance(c.get("id"), str) or not NAME.match(c["id"]):
                    raise CapsbenchError(f"{path}: 'claims[{i}].id' = {c.get('id')!r} must be a name (letters, "
                                         "digits, '_ - . / space'), e.g. author2024-what")
                ids.append(c["id"])
    return ids


def load_claims_file(path: Path) -> list[Claim]:
    """The validated claims of one claims YAML file."""
    source, claims, unsourced = read_sourced_list(path, "claims")
    return [_claim(_named(path, raw), f"claims[{i}]", raw, source, unsourced) for i, raw in enumerate(claims)]


def _named(path: Path, raw: Any) -> str:
    """How errors name a claim: its file, and its id where it has one."""
    return f"{path}, claim {raw['id']}" if isinstance(raw, dict) and isinstance(raw.get("id"), str) else str(path)


def _claim(path: str, where: str, raw: Any, source: str, unsourced: str | None) -> Claim:
    entry = check_mapping(path, where, raw, _CLAIM_KEYS, _REQUIRED_CLAIM)
    for key in ("id", "suite", "dataset", "metric"):
        if not isinstance(entry[key], str) or not NAME.match(entry[key]):
            raise CapsbenchError(
                f"{path}: '{where}.{key}' = {entry[key]!r} may use only letters, digits, '_ - . / space'"
            )
    ratio = entry.get("ratio")
    if ratio is not None and not (math.isfinite(ratio) and ratio > 1):
        raise CapsbenchError(f"{path}: '{where}.ratio' must be a number above 1 (the claimed factor), got {ratio!r}")
    sides = [_side(path, f"{where}.{name}", entry[name]) for name in ("better", "worse")]
    _check_metric(path, where, entry)
    checks = parse_checks(path, where, entry.get("checks", []), dict(zip(("better", "worse"), sides)))
    _check_check_metrics(path, where, entry["suite"], checks)
    train = check_mapping(path, f"{where}.train", entry.get("train", {}), _TRAIN_KEYS, ())
    if not 0 < train.get("target_val_accuracy", 50) <= 100 or train.get("max_epochs", 1) < 1:
        raise CapsbenchError(f"{path}: '{where}.train' needs target_val_accuracy in (0, 100] and max_epochs >= 1, "
                             f"got {train}")
    min_effect = entry.get("min_effect")
    if min_effect is not None and not (math.isfinite(min_effect) and min_effect > 0):
        raise CapsbenchError(f"{path}: '{where}.min_effect' must be a positive difference in the metric's units, "
                             f"got {min_effect!r}")
    relation, margin = entry.get("relation", "beats"), entry.get("margin")
    if relation not in RELATIONS:
        raise CapsbenchError(f"{path}: '{where}.relation' must be one of {', '.join(RELATIONS)}, got {relation!r}")
    if (relation != "beats") != (margin is not None) or (margin is not None and not margin > 0):
        raise CapsbenchError(f"{path}: '{where}': a parity or no_better claim needs a positive margin (the "
                             f"difference that would contradict it), and a beats claim none; got {relation}, {margin}")
    if min_effect is not None and (relation != "beats" or ratio is not None):
        raise CapsbenchError(f"{path}: '{where}.min_effect' is the threshold of a beats claim; a parity or no_better "
                             "claim states its margin, a ratio claim its factor")
    _check_can_fail(path, where, entry, sides)
    data = entry.get("data", [])
    if not all(isinstance(d, str) and d in DATA_FILES for d in data):
        raise CapsbenchError(f"{path}: '{where}.data' must list data sources among {', '.join(DATA_FILES)}, got {data}")
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
        checks=checks,
        data=tuple(data),
        run=dict(entry.get("run", {})),
        unsourced=unsourced,
        min_effect=None if min_effect is None else float(min_effect),
        train=dict(train),
        relation=relation,
        margin=None if margin is None else float(margin),
        origin=str(path),
    )


def _check_can_fail(path: Path | str, where: str, entry: dict[str, Any], sides: list[Side]) -> None:
    """Refuse a claim whose verdict is fixed by construction (reporting/containment.py): identical sides as measured
    (defaults resolved); a beats claim whose better side contains the worse side's correct images on the same model
    (it cannot fail) or is contained in them (it cannot hold); a no_better claim whose better side is contained in
    the worse side's (it cannot fail)."""
    if entry["suite"] not in SUITES:
        return
    metrics = SUITES.get(entry["suite"]).metrics
    contains = {m.name: m.contains for m in metrics}
    higher = next(m.higher_is_better for m in metrics if m.name == entry["metric"])
    better, worse = (measured(s, entry["metric"], entry.get("sweep", {}), entry.get("run", {})) for s in sides)

    def good(x: Measured, y: Measured) -> bool:  # x is at least as good as y on every image, by construction
        return at_least(x, y, contains) if higher else at_least(y, x, contains)

    relation, model = entry.get("relation", "beats"), sides[0].model
    if better == worse:
        why = "its two sides are the same measurement (defaults resolved): the difference is 0 by construction"
    elif relation == "beats" and good(better, worse):
        why = f"the better side counts every image the worse side counts, on the same {model}: 'better' cannot fail"
    elif relation == "beats" and good(worse, better):
        why = f"the worse side counts every image the better side counts, on the same {model}: 'better' cannot hold"
    elif relation == "no_better" and good(worse, better):
        why = (f"the worse side counts every image the better side counts, on the same {model}: 'no better' cannot "
               "fail")
    else:
        return
    raise CapsbenchError(f"{path}: '{where}' cannot be decided by data: {why} (worst case within each attack, larger "
                         "eps within smaller, robust within clean); compare what the source compares (e.g. two "
                         "attacks' success, or two models)")


def _side(path: Path | str, where: str, raw: Any) -> Side:
    side = check_mapping(path, where, raw, _SIDE_KEYS, ("model",))
    return Side(
        side["model"],
        None if "published" not in side else float(side["published"]),
        dict(side.get("model_args", {})),
        dict(side.get("settings", {})),
        side.get("training"),
        side.get("metric"),
        dict(side.get("sweep", {})),
    )


def _check_metric(path: Path | str, where: str, entry: dict[str, Any]) -> None:
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
    _check_sweep(path, f"{where}.sweep", entry.get("sweep", {}), suite)
    for name in ("better", "worse"):
        _check_sweep(path, f"{where}.{name}.sweep", entry[name].get("sweep", {}), suite)


def _check_sweep(path: Path | str, where: str, sweep: dict[str, Any], suite: Any) -> None:
    """A sweep's columns are the suite's, and its values ones a run can measure (SWEEP_VALUES)."""
    check_sweep_columns(path, where, sweep, suite)
    for column, value in sweep.items():
        if column in SWEEP_VALUES and not SWEEP_VALUES[column][0](value):
            raise CapsbenchError(f"{path}: '{where}.{column}' = {value!r} must be {SWEEP_VALUES[column][1]}")


def _check_check_metrics(path: Path | str, where: str, suite_name: str, checks: tuple[Check, ...]) -> None:
    """A check's own metric and sweep columns must be the suite's."""
    if suite_name not in SUITES:
        return
    suite = SUITES.get(suite_name)
    for i, check in enumerate(checks):
        if check.metric is not None and check.metric not in {m.name for m in suite.metrics}:
            raise CapsbenchError(
                f"{path}: '{where}.checks[{i}].metric' = {check.metric!r} is not a metric of suite {suite_name!r}"
            )
        _check_sweep(path, f"{where}.checks[{i}].sweep", check.sweep, suite)


def parse_checks(path: Path | str, where: str, raw: Any, sides: dict[str, Side]) -> tuple[Check, ...]:
    """The validated `checks` list of one claim; errors name the file and the key."""
    if not isinstance(raw, list):
        raise CapsbenchError(f"{path}: '{where}.checks' must be a list of checks, got {type(raw).__name__}")
    checks = []
    for i, entry in enumerate(raw):
        at = f"{where}.checks[{i}]"
        if not isinstance(entry, dict) or not set(entry) <= _KEYS or "what" not in entry:
            raise CapsbenchError(
                f"{path}: '{at}' must be a mapping with 'what', one of {', '.join(KINDS)}, and optionally "
                f"sides, metric, sweep, needs; got {entry!r}"
            )
        kinds = [k for k in KINDS if k in entry]
        if len(kinds) != 1:
            raise CapsbenchError(f"{path}: '{at}' needs exactly one of {', '.join(KINDS)}, got {kinds or 'none'}")
        kind = kinds[0]
        value, expected = entry[kind], KINDS[kind][0]
        if isinstance(value, bool) or not isinstance(value, expected):
            raise CapsbenchError(f"{path}: '{at}.{kind}' has the wrong type: {value!r}")
        chosen = tuple(entry.get("sides", SIDES))
        if not chosen or not set(chosen) <= set(SIDES):
            raise CapsbenchError(f"{path}: '{at}.sides' must name better and/or worse, got {chosen!r}")
        if kind == "near_published" and any(sides[s].published is None for s in chosen):
            raise CapsbenchError(f"{path}: '{at}' compares with published numbers: give each of {chosen} `published`")
        if kind == "model" and not NAME.match(value):
            raise CapsbenchError(f"{path}: '{at}.model' must name a model (letters, digits, '_ - . / space'), got "
                                 f"{value!r}")
        checks.append(Check(entry["what"], kind, value, chosen, entry.get("metric"), dict(entry.get("sweep", {})),
                            entry.get("needs", "")))
    return tuple(checks)
