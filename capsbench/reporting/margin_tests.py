"""Claims that say two models are alike: parity ("as robust as": neither is better by the margin or more) and no better
("fooled as easily as": the first is not better by the margin or more). Each is an equivalence-type test with a stated
margin: one-sided t-tests over the per-seed differences (two of them for parity, Schuirmann's TOST), with the paired
test on the pooled per-image outcomes beside them where both sides were measured on the same images; both must give
p < 0.05. Refuted where a difference beyond the margin holds in every seed with p < 0.05 on both."""

from __future__ import annotations

from typing import Any

import numpy as np

from capsbench.reporting.claim_tests import ONE_SEED_NEEDS, Decision, Evidence
from capsbench.util.stats import ALPHA, beyond_margin_p, paired_beyond_margin_p


def decide_margin(claim: Any, metric: Any, better: Evidence, worse: Evidence) -> Decision:
    """The verdict of a parity or no_better claim (claim.relation, claim.margin in the metric's units): +1 supported,
    -1 refuted, 0 not resolved."""
    sign = 1.0 if metric.higher_is_better else -1.0
    margin = float(claim.margin)
    seeds = sorted(set(better.values) & set(worse.values))
    if len(seeds) < 2:
        return Decision(0, "one seed: a margin test needs the spread between training seeds", None, ONE_SEED_NEEDS)
    diffs = [sign * (better.values[s] - worse.values[s]) for s in seeds]  # > 0: `better` is better
    pooled = _pooled(better, worse, seeds)
    scale = 100.0 if metric.unit == "%" else None  # image outcomes count fractions, the metric percent
    alike = [(-margin, True), (margin, False)] if claim.relation == "parity" else [(margin, False)]
    p_seed = max(beyond_margin_p(diffs, bound, above) for bound, above in alike)
    paired = pooled is not None and scale is not None  # outcomes are correctness: a - b > 0 means `better` is
    p_image = max(paired_beyond_margin_p(*pooled, bound / scale, above) for bound, above in alike) if paired else None
    said = _said(claim, diffs, p_seed, p_image, len(pooled[0]) if pooled else None)
    if max(p_seed, p_image or 0.0) < ALPHA:
        return Decision(1, f"within the margin of {margin:g} in every test; {said}", max(p_seed, p_image or 0.0))
    for bound, above in ([(margin, True), (-margin, False)] if claim.relation == "parity" else [(margin, True)]):
        if all((d > bound) if above else (d < bound) for d in diffs):
            p = beyond_margin_p(diffs, bound, above)
            if paired:
                p = max(p, paired_beyond_margin_p(*pooled, bound / scale, above))
            if p < ALPHA:
                who = claim.better.model if above else claim.worse.model
                return Decision(-1, f"{who} is better by more than the margin of {margin:g} in every seed "
                                    f"(p = {p:.2g}{', on the paired images too' if paired else ''}); {said}", p)
    return Decision(0, f"neither within nor beyond the margin of {margin:g}: {said}", p_seed, "more seeds")


def _pooled(better: Evidence, worse: Evidence, seeds: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    if any(s not in better.outcomes or s not in worse.outcomes for s in seeds):
        return None
    if any(len(better.outcomes[s]) != len(worse.outcomes[s]) for s in seeds):
        return None
    return (np.concatenate([better.outcomes[s] for s in seeds]), np.concatenate([worse.outcomes[s] for s in seeds]))


def _said(claim: Any, diffs: list[float], p_seed: float, p_image: float | None, images: int | None) -> str:
    name = "two one-sided t-tests" if claim.relation == "parity" else "one-sided t-test"
    text = (f"per-seed differences {', '.join(f'{d:+.3g}' for d in diffs)} ({claim.better.model} - "
            f"{claim.worse.model}); {name} over {len(diffs)} seeds against the margin p = {p_seed:.2g}")
    if p_image is not None:
        text += f", paired test on {images:,} pooled test images p = {p_image:.2g}"
    return text
