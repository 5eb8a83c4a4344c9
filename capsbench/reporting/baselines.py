"""Published reference numbers from baselines/*.yaml: schema validation and matching to measured table cells."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from capsbench.errors import CapsbenchError
from capsbench.suites import SUITES
from capsbench.util.shipped import shipped_dir

NAME = re.compile(r"^[A-Za-z0-9_\-. /]+$")
_SOURCE_KEYS = {"id": str, "citation": str, "arxiv": str, "openreview": str, "url": str, "unsourced": str}
_RESULT_KEYS = {
    "suite": str, "dataset": str, "model": str, "metric": str, "value": (int, float), "std": (int, float),
    "where": str, "protocol": str, "model_args": dict, "sweep": dict,
}
_REQUIRED_SOURCE = ("id", "citation")
_REQUIRED_RESULT = ("suite", "dataset", "model", "metric", "value", "where", "protocol")


@dataclass(frozen=True)
class Published:
    """One number a paper reports, with where it is (table or figure) and the protocol behind it.

    model_args: constructor arguments the measured model must have for this number to sit beside it
    (e.g. routing_iterations: 3); sweep: sweep-column values selecting the table column (e.g. eps: 0.1).
    """

    source: str  # e.g. "Sabour et al. 2017, Dynamic Routing Between Capsules (arXiv:1710.09829)"
    suite: str
    dataset: str
    model: str
    metric: str
    value: float
    where: str
    protocol: str
    std: float | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, Any] = field(default_factory=dict)

    @property
    def footnote(self) -> str:
        return f"{self.source}, {self.where}: {self.protocol}"


def baselines_dir() -> Path:
    """The shipped baselines/: the repository's, or the installed wheel's copy."""
    return shipped_dir() / "baselines"


def load_baselines(directory: Path | None = None) -> list[Published]:
    """Every entry of every baselines/*.yaml, validated; a bad file raises CapsbenchError naming file and key."""
    directory = directory or baselines_dir()
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise CapsbenchError(f"no baselines/*.yaml under {directory}; point baselines_dir= at a folder holding them")
    return [entry for path in files for entry in load_file(path)]


def load_file(path: Path) -> list[Published]:
    """The validated published numbers of one baselines YAML file."""
    label, results, _ = read_sourced_list(path, "results")
    return [_entry(path, i, raw, label) for i, raw in enumerate(results)]


class Sourced(NamedTuple):
    """A sourced YAML file: its source's citation (with its reference), its entries, and, for numbers that no paper
    prints, what they are instead (the source's `unsourced` text; None for a primary source)."""

    label: str
    entries: list[Any]
    unsourced: str | None


def read_sourced_list(path: Path, key: str) -> Sourced:
    """A YAML file holding exactly `source` and a non-empty list under `key`."""
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CapsbenchError(f"{path}{at}: not valid YAML ({problem}); fix the syntax there") from None
    if not isinstance(doc, dict) or set(doc) != {"source", key}:
        got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise CapsbenchError(f"{path}: expected a mapping with exactly the keys 'source' and '{key}', got {got}")
    label = _source_label(path, doc["source"])
    if not isinstance(doc[key], list) or not doc[key]:
        raise CapsbenchError(f"{path}: '{key}' must be a non-empty list of entries")
    return Sourced(label, doc[key], doc["source"].get("unsourced"))


def _source_label(path: Path, raw: Any) -> str:
    """A file's validated `source` mapping as its citation text, with the arXiv / OpenReview / URL reference."""
    source = check_mapping(path, "source", raw, _SOURCE_KEYS, _REQUIRED_SOURCE)
    ref = f"arXiv:{source['arxiv']}" if "arxiv" in source else (
        f"OpenReview {source['openreview']}" if "openreview" in source else source.get("url", ""))
    return source["citation"] + (f" ({ref})" if ref else "")


def check_mapping(path: Path, where: str, raw: Any, keys: dict[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    """`raw` as a mapping holding only `keys` (name -> expected type) and every `required` one; errors name the key."""
    if not isinstance(raw, dict):
        raise CapsbenchError(f"{path}: '{where}' must be a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in keys:
            raise CapsbenchError(f"{path}: unknown key '{where}.{key}'; valid keys: {', '.join(keys)}")
    for key in required:
        if key not in raw:
            raise CapsbenchError(f"{path}: '{where}' lacks the required key '{key}'")
    for key, value in raw.items():
        expected = keys[key]
        if isinstance(value, bool) or not isinstance(value, expected):
            names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
            raise CapsbenchError(f"{path}: '{where}.{key}' must be {names}, got {value!r}")
    return raw


def _entry(path: Path, index: int, raw: Any, source: str) -> Published:
    where = f"results[{index}]"
    entry = check_mapping(path, where, raw, _RESULT_KEYS, _REQUIRED_RESULT)
    for key in ("suite", "dataset", "model", "metric"):
        if not NAME.match(entry[key]):
            raise CapsbenchError(
                f"{path}: '{where}.{key}' = {entry[key]!r} may use only letters, digits, '_ - . / space'"
            )
    for key in ("value", "std"):
        if key in entry and not math.isfinite(entry[key]):
            raise CapsbenchError(f"{path}: '{where}.{key}' must be a finite number, got {entry[key]!r}")
    if entry.get("std", 0) < 0:
        raise CapsbenchError(f"{path}: '{where}.std' must be >= 0, got {entry['std']!r}")
    _check_metric(path, where, entry)
    return Published(
        source=source,
        suite=entry["suite"],
        dataset=entry["dataset"],
        model=entry["model"],
        metric=entry["metric"],
        value=float(entry["value"]),
        where=entry["where"],
        protocol=entry["protocol"],
        std=float(entry["std"]) if "std" in entry else None,
        model_args=dict(entry.get("model_args", {})),
        sweep=dict(entry.get("sweep", {})),
    )


def _check_metric(path: Path, where: str, entry: dict[str, Any]) -> None:
    """For suites this install knows, the metric and sweep columns must be ones the suite declares."""
    if entry["suite"] not in SUITES:
        return  # a suite from another install or a later version: kept, matched only where it exists
    suite = SUITES.get(entry["suite"])
    declared = [m.name for m in suite.metrics]
    if entry["metric"] not in declared:
        raise CapsbenchError(
            f"{path}: '{where}.metric' = {entry['metric']!r} is not a metric of suite "
            f"{entry['suite']!r}; expected one of: {', '.join(declared)}"
        )
    check_sweep_columns(path, f"{where}.sweep", entry.get("sweep", {}), suite)


def check_sweep_columns(path: Path, where: str, columns: Any, suite: Any) -> None:
    """Every key of a sweep mapping (`where`) must be one of the suite's sweep columns."""
    for col in columns:
        if col not in suite.sweep_columns:
            raise CapsbenchError(
                f"{path}: '{where}.{col}' is not a sweep column of suite {suite.name!r}; "
                f"expected one of: {', '.join(suite.sweep_columns) or '(none)'}"
            )


def matching(entries: list[Published], *, suite: str, model_args: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Reported rows for one suite's table: {model, dataset, metric, <sweep>, value, std, footnote}.

    model_args maps each measured model to its constructor arguments as logged (strings). An entry applies
    when all its model_args equal the measured ones; where several apply to one cell the most specific
    (most model_args) wins, so "3 iterations, no decoder" beats "3 iterations" for a decoder-less CapsNet.
    """
    best: dict[tuple, tuple[int, Published]] = {}
    for e in entries:
        measured = model_args.get(e.model)
        if e.suite != suite or measured is None:
            continue
        if all(measured.get(k) == logged_text(v) for k, v in e.model_args.items()):
            cell = (e.model, e.dataset, e.metric, tuple(sorted(e.sweep.items())))
            if cell not in best or len(e.model_args) > best[cell][0]:
                best[cell] = (len(e.model_args), e)
    return [
        {
            "model": e.model,
            "dataset": e.dataset,
            "metric": e.metric,
            **e.sweep,
            "value": e.value,
            "std": e.std,
            "footnote": e.footnote,
        }
        for _, e in best.values()
    ]


def logged_text(value: Any) -> str:
    """How MLflow params spell a constructor argument (str of the Python value, lists as lists)."""
    return str(list(value) if isinstance(value, tuple) else value)
