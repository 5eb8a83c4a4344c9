"""What a unit's numbers become in MLflow: named metrics for its records (with n and the 95 % interval beside every
accuracy), its training curves as steps (train/loss, train/accuracy, val/accuracy, train/lr), and safe names."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from typing import Any

CURVES = {
    "train_loss": "train/loss",
    "train_accuracy": "train/accuracy",
    "val_accuracy": "val/accuracy",
    "lr": "train/lr",
}
BESIDE = ("n", "ci_low", "ci_high")  # logged as <metric key>.n, .ci_low, .ci_high next to the value
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /]")

Metric = tuple[str, float, int, int]  # key, value, timestamp (ms), step


def metric_key(record: dict[str, Any], columns: Iterable[str]) -> str:
    """The MLflow name of a record: its metric and sweep coordinates, e.g. robust_accuracy.pgd.eps_0.1 (text values
    as they are, numbers as <column>_<value>), with anything MLflow does not accept replaced by '_'."""
    parts = [record["metric"]]
    for col in columns:
        value = record.get(col)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        parts.append(
            f"{col}_{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
        )
    return _UNSAFE.sub("_", ".".join(parts))


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def record_metrics(records: Iterable[dict[str, Any]], columns: Iterable[str], now: int) -> list[Metric]:
    """One metric per record, and beside it the record's n and interval where it has them (accuracies do)."""
    columns = tuple(columns)
    out: list[Metric] = []
    for r in records:
        key = metric_key(r, columns)
        for suffix, field in (("", "value"), *((f".{b}", b) for b in BESIDE)):
            value = _number(r.get(field))
            if value is not None:
                out.append((key + suffix, value, now, 0))
    return out


def curve_metrics(curves: Iterable[dict[str, Any]], now: int, skip: Collection[int] = ()) -> list[Metric]:
    """Per-epoch training history as steps (the epoch number), leaving out epochs already streamed (`skip`)."""
    return [
        (name, value, now, int(h["epoch"]))
        for h in curves
        if int(h["epoch"]) not in skip
        for field, name in CURVES.items()
        if (value := _number(h.get(field))) is not None
    ]
