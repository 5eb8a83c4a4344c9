"""Whether measured records meet what a claim's published numbers assume (its `checks`, declared in
baselines/claims/*.yaml): a claim whose measured models miss one is judged "protocol not met", with the numbers that
missed it. A smoke run meets no claim's protocol."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from capsbench.models import MODELS
from capsbench.reporting.claim_files import KINDS, Check, Claim, Side
from capsbench.reporting.frame import row_models, same_value

SMOKE_NEEDS = "budget=quick or budget=paper"

@dataclass(frozen=True)
class Miss:
    """A check the measured records fail: what was measured against what the claim assumes, and what would meet it."""

    text: str
    needs: str


def side_rows(frame: pd.DataFrame, claim: Claim, side: Side, metric: str, sweep: dict[str, Any]) -> pd.DataFrame:
    """The records standing for one side of a claim: its model, trained as the side says (standard unless it names
    `training`), on the claim's dataset, for `metric` at the `sweep` values."""
    rows = frame[(frame["model"] == side.model) & (frame["dataset"] == claim.dataset) & (frame["metric"] == metric)]
    rows = rows[row_models(rows) == side.model + (f" (training={side.training})" if side.training else "")]
    for col, value in sweep.items():
        rows = rows[rows[col].map(lambda v, want=value: same_value(v, want))] if col in rows else rows.iloc[0:0]
    return rows


def protocol_misses(claim: Claim, frames: dict[str, pd.DataFrame], budget: str) -> list[Miss]:
    """Every declared check the records miss (with the numbers), after the rule that a smoke run judges nothing;
    `frames`: each side's records ("better", "worse")."""
    if budget == "smoke":
        return [Miss("budget=smoke trains tiny models on a few thousand images: it checks the pipeline, never a claim",
                     SMOKE_NEEDS)]
    misses = []
    for check in claim.checks:
        needs = check.needs or KINDS[check.kind][1]
        if check.kind == "budget":
            if budget != check.value:
                misses.append(Miss(f"measured at budget={budget}; {check.what}", needs))
            continue
        for name in check.sides:
            miss = _side_miss(frames[name], claim, getattr(claim, name), check)
            if miss:
                misses.append(Miss(miss, needs))
    return misses


def _side_miss(frame: pd.DataFrame, claim: Claim, side: Side, check: Check) -> str | None:
    """Why one side misses a model or value check (mean over its seeds), or None when it meets it."""
    if check.kind == "model":
        if side.model == check.value:
            return None
        built = "" if check.value in MODELS else ", which capsbench does not build"
        return f"{side.model} stands for a side whose model is {check.value}{built}: {check.what}"
    own = check.kind == "near_published" or check.metric is None
    metric = (side.metric or claim.metric) if own else check.metric
    sweep = {**claim.sweep, **side.sweep} if own else check.sweep
    rows = side_rows(frame, claim, side, metric, sweep)
    label = f"{side.model} {metric}{''.join(f', {k}={v}' for k, v in sweep.items())}"
    if rows.empty:
        return f"{label} not measured ({check.what})"
    mean = float(rows["value"].mean())
    seeds = f" (mean of {rows['seed'].nunique()} seeds)" if rows["seed"].nunique() > 1 else ""
    if check.kind == "at_least" and mean < check.value:
        return f"{label} {mean:.4g}{seeds} < {check.value:g}{_noise(rows, mean, check.value)}: {check.what}"
    if check.kind == "at_most" and mean > check.value:
        return f"{label} {mean:.4g}{seeds} > {check.value:g}{_noise(rows, mean, check.value)}: {check.what}"
    if check.kind == "near_published" and abs(mean - side.published) > check.value:
        return (f"{label} {mean:.4g}{seeds} is {abs(mean - side.published):.3g} from the published "
                f"{side.published:g} (at most {check.value:g}): {check.what}")
    return None


def _noise(rows: pd.DataFrame, mean: float, threshold: float) -> str:
    """For a percentage measured on test images: whether the miss lies within the sampling noise of the images behind
    it (95 %: 1.96 binomial standard errors of the distinct images; the seeds share the draw, so three seeds on 1,568
    images are 1,568 images, not 4,704), said with its size; "" otherwise."""
    if "n" not in rows or rows["n"].isna().any() or not 0 < mean < 100:
        return ""
    images = int(rows["n"].astype(float).max())
    half = 1.96 * math.sqrt(mean * (100 - mean) / images)
    if abs(mean - threshold) > half:
        return f" (noise ±{half:.2g} points on {images:,} distinct images)"
    return (f", within noise (±{half:.2g} points on {images:,} distinct images): the check cannot tell these models "
            "apart")
