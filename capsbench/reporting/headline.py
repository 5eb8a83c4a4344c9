"""A suite's headline numbers: the columns of its first table (robustness: clean accuracy and the worst case at each
eps; accuracy: test accuracy and error) per model, mean over seeds, named as MLflow names them
(robust_accuracy.worst_case.eps_0.1): a few numbers to show beside the full set of metrics."""

from __future__ import annotations

from typing import Any

import pandas as pd

from capsbench.reporting.frame import records_frame, select
from capsbench.suites.layout import Column, SweepColumns
from capsbench.tracking import metric_key

PREFIX = "headline/"  # a unit run's headline metrics: headline/<metric key>, beside <metric key> itself


def _headline_records(records: list[dict[str, Any]], suite: Any) -> pd.DataFrame:
    """The records behind the suite's first table's columns, each with its MLflow metric key (column `key`)."""
    if not records or suite.layout is None:
        return pd.DataFrame()
    spec = suite.layout.tables[0]
    frame = select(records_frame(records, suite), spec.keep, spec.drop)
    parts = []
    for col in spec.columns:
        if isinstance(col, (Column, SweepColumns)):
            rows = select(frame[frame["metric"] == col.metric], col.where)
            parts.append(select(rows, drop={col.over: col.drop}) if isinstance(col, SweepColumns) else rows)
    if not parts:
        return pd.DataFrame()
    rows = pd.concat(parts)
    plain = rows.astype(object).where(rows.notna(), None)  # a missing sweep value is no part of a name
    return rows.assign(key=[metric_key(r, suite.sweep_columns) for r in plain.to_dict("records")])


def headline(records: list[dict[str, Any]], suite: Any) -> dict[str, dict[str, float]]:
    """model -> {metric key: mean over seeds} for the columns of the suite's first table ({} without a layout)."""
    rows = _headline_records(records, suite)
    if rows.empty:
        return {}
    out: dict[str, dict[str, float]] = {}
    for (model, key), value in rows.groupby(["model", "key"], sort=False)["value"].mean().items():
        out.setdefault(str(model), {})[key] = float(value)
    return out


def headline_values(records: list[dict[str, Any]], suite: Any) -> list[dict[str, Any]]:
    """The first table's numbers for scripts, one per model, seed and sweep value: {model, seed, metric, <sweep
    column>, value, n, ci_low, ci_high} (n and the 95 % interval where the record has them, else None)."""
    rows = _headline_records(records, suite)
    out = []
    for r in rows.astype(object).where(rows.notna(), None).to_dict("records"):
        entry = {"model": r["model"], "seed": int(r["seed"]), "metric": r["metric"]}
        entry.update({c: r[c] for c in suite.sweep_columns if r.get(c) is not None})
        entry.update(value=float(r["value"]), n=None if r.get("n") is None else int(r["n"]),
                     ci_low=r.get("ci_low"), ci_high=r.get("ci_high"))
        out.append(entry)
    return out


def unit_headline(records: list[dict[str, Any]], suite: Any) -> dict[str, float]:
    """One unit's headline metrics as MLflow metrics: headline/<metric key>."""
    return {PREFIX + key: value for values in headline(records, suite).values() for key, value in values.items()}
