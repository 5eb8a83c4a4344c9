"""Published numbers (baselines/, as `baselines.matching` returns them) looked up for a table cell: the same model,
dataset and metric, and exactly the sweep values that fix the cell (eps, part, r, ...)."""

from __future__ import annotations

from typing import Any

from capsbench.reporting.frame import format_sweep, same_value
from capsbench.reporting.model import Published

ENTRY_KEYS = {"model", "dataset", "metric", "value", "std", "footnote"}


class PublishedIndex:
    """Reported rows {model, dataset, metric, <sweep column>: value, value, std, footnote} by cell."""

    def __init__(self, reported: list[dict[str, Any]]) -> None:
        self.entries = reported

    def find(self, model: str, dataset: str, metric: str, context: dict[str, Any],
             described: dict[str, set[str]]) -> dict[str, Any] | None:
        """The entry for a cell fixed by `context` (sweep column -> value), or None. An entry matches when it names
        every fixed sweep value and any other sweep value it names is the one the cell's records carry in a
        described column (e.g. test_set: affNIST matches only records measured on the real affNIST)."""
        for e in self.entries:
            if (e["model"], e["dataset"], e["metric"]) != (model, dataset, metric):
                continue
            sweep = {k: v for k, v in e.items() if k not in ENTRY_KEYS and v is not None}
            if any(k not in sweep or not same_value(sweep[k], v) for k, v in context.items()):
                continue
            rest = {k: v for k, v in sweep.items() if k not in context}
            if all(described.get(k) == {format_sweep(v)} for k, v in rest.items()):
                return e
        return None

    @staticmethod
    def cell(entry: dict[str, Any], references: list[str]) -> Published:
        """The entry as a cell; its citation is appended to `references` unless already there."""
        if entry["footnote"] not in references:
            references.append(entry["footnote"])
        std = entry.get("std")
        return Published(
            float(entry["value"]), None if std is None else float(std), references.index(entry["footnote"]) + 1
        )
