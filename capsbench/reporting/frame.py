"""Tidy records as a DataFrame in a fixed column order, their aggregation over seeds, and the sweep-value matching
every table and figure uses (1 == 1.0, so values read back from CSV match the ones a suite wrote)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

RECORD_COLUMNS = ["suite", "model", "dataset", "seed", "metric", "value"]
UNCERTAINTY_COLUMNS = [
    "n",
    "ci_low",
    "ci_high",
    "outcomes",
    "per_image",
]  # accuracy records: images, 95 % Wilson interval, per image; distances: per-image values and the median's interval
UNDERTRAINED = "undertrained"  # True on every record of a model whose validation accuracy stayed below the floor
TRAINING = "training"  # "pgd", "affine", ... on every record of a model trained so (capsbench.run.plan.training_column)
WEIGHTS = "weights_sha256"  # on every record of a model measured with weights trained elsewhere (training=external)
# on every record of a unit that measured fewer than all test images: how they were drawn (capsbench.data.test_subset)
DRAW_COLUMNS = ("test_draw", "test_subset_seed", "test_subset_sha256")


def records_frame(records: list[dict[str, Any]], suite: Any) -> pd.DataFrame:
    """Tidy records as a DataFrame with the fixed columns first, then the suite's sweep columns, then the uncertainty
    and detail columns the records carry."""
    frame = pd.DataFrame.from_records(records)
    for col in [*RECORD_COLUMNS, *suite.sweep_columns]:
        if col not in frame:
            frame[col] = pd.NA
    extra = [c for c in (*UNCERTAINTY_COLUMNS, *suite.detail_columns, UNDERTRAINED, TRAINING, WEIGHTS, *DRAW_COLUMNS)
             if c in frame]
    return frame[[*RECORD_COLUMNS, *suite.sweep_columns, *extra]]


def draw_note(frame: pd.DataFrame) -> str | None:
    """Which test images the records measured, when fewer than all: 'test images: a class-stratified random draw
    (seed 0, indices 888623e2ad36)', one clause per draw; None when every record measured the whole test split."""
    if DRAW_COLUMNS[0] not in frame:
        return None
    draws = frame[list(DRAW_COLUMNS)].dropna(subset=[DRAW_COLUMNS[0]]).drop_duplicates()
    words = []
    for draw, seed, sha in draws.itertuples(index=False):
        if draw == "head":
            words.append(f"the first n of the test split (indices {sha})")
        else:
            words.append(f"a class-stratified random draw (seed {int(seed)}, indices {sha})")
    return f"test images: {'; '.join(words)}" if words else None


def row_models(frame: pd.DataFrame) -> pd.Series:
    """The model each record's table row is named by: "capsnet", or "capsnet (training=pgd)" for a model trained
    adversarially or augmented, so that it is a row of its own beside the standard one."""
    if TRAINING not in frame:
        return frame["model"]
    trained = frame[TRAINING].notna() & (frame[TRAINING].astype(str) != "")
    return frame["model"].where(~trained, frame["model"] + " (training=" + frame[TRAINING].astype(str) + ")")


def same_value(a: Any, b: Any) -> bool:
    """Sweep values compare as numbers when both are numbers (r=1 equals r=1.0), else as text."""
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _missing(v: Any) -> bool:
    return v is None or (not isinstance(v, str) and bool(pd.isna(v)))


def value_mask(frame: pd.DataFrame, column: str, values: tuple[Any, ...]) -> np.ndarray:
    """Rows whose `column` equals any of `values`; a column the frame lacks matches nothing."""
    if column not in frame:
        return np.zeros(len(frame), dtype=bool)
    return np.array([any(same_value(v, w) for w in values) for v in frame[column]], dtype=bool)


def select(
    frame: pd.DataFrame, keep: Mapping[str, Any] | None = None, drop: Mapping[str, tuple[Any, ...]] | None = None
) -> pd.DataFrame:
    """The rows with every `keep` value (a scalar, or a tuple of accepted values) and none of the `drop` values."""
    mask = np.ones(len(frame), dtype=bool)
    for col, val in (keep or {}).items():
        mask &= value_mask(frame, col, val if isinstance(val, tuple) else (val,))
    for col, vals in (drop or {}).items():
        mask &= ~value_mask(frame, col, vals)
    return frame[mask]


def ordered_values(frame: pd.DataFrame, column: str, first: tuple[Any, ...] = (), numeric: bool = False) -> list[Any]:
    """Distinct non-missing values of a column: `first` (those present) in its order, then the rest in record
    order, or ascending when `numeric` and every value is a number."""
    seen: list[Any] = []
    for v in frame[column] if column in frame else ():
        if not _missing(v) and not any(same_value(v, s) for s in seen):
            seen.append(v)
    if numeric and all(_number(v) for v in seen):
        seen.sort(key=float)
    head = [v for f in first for v in seen if same_value(v, f)]
    return head + [v for v in seen if not any(same_value(v, h) for h in head)]


def _number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, str) or v.strip() != ""


def format_sweep(value: Any) -> str:
    """A sweep value as text: numbers in the shortest form (0.05, 3), anything else as it is."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, str):
        return str(value)
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)
