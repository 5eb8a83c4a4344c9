"""Claims that say two models are alike: parity ("as robust as", "fooled as easily as": neither is better by the
margin or more) and no better (the first is not better by the margin or more). Each is an equivalence-type test with
a stated margin: one-sided t-tests over the per-seed differences (their spread floored at one image in n; two of them
for parity, Schuirmann's TOST) and, where both sides were measured on the same images, Tango's score test on the
per-image means over the seeds (each distinct image once) beside them; every test must give p < 0.05. Refuted where a
difference beyond the margin holds in every seed with p < 0.05 on both. The row says which side is ahead whenever every
seed puts the same side ahead."""

from __future__ import annotations

from typing import Any

from capsbench.reporting.claim_tests import (
    ONE_SEED_NEEDS,
    Decision,
    Evidence,
    Images,
    estimate_text,
    paired_images,
    resolution,
)
from capsbench.util.seed_tests import beyond_margin_p
from capsbench.util.stats import ALPHA


def decide_margin(claim: Any, metric: Any, better: Evidence, worse: Evidence, one_seed: bool = False) -> Decision:
    """The verdict of a parity or no_better claim (claim.relation, claim.margin in the metric's units): +1 supported,
    -1 refuted, 0 not resolved. `one_seed`: one seed may decide on its images alone (one_seed_verdicts=true)."""
    sign = 1.0 if metric.higher_is_better else -1.0
    margin = float(claim.margin)
    seeds = sorted(set(better.values) & set(worse.values))
    scale = 100.0 if metric.unit == "%" else None  # image outcomes count fractions, the metric percent
    images = paired_images(better, worse, seeds) if scale else None
    alike = [(-margin, True), (margin, False)] if claim.relation == "parity" else [(margin, False)]
    beyond = [(margin, True), (-margin, False)] if claim.relation == "parity" else [(margin, True)]
    diffs = [sign * (better.values[s] - worse.values[s]) for s in seeds]  # > 0: `better` is better
    if len(seeds) < 2:
        if not (one_seed and images is not None and seeds):
            return Decision(0, "one seed: a margin test needs the spread between training seeds (or "
                               "one_seed_verdicts=true and per-image outcomes)", None, ONE_SEED_NEEDS)
        return _one_seed(claim, images, diffs[0], margin, alike, beyond, scale)
    step = resolution(claim, metric, better)
    p_seed = max(beyond_margin_p(diffs, bound, above, step) for bound, above in alike)
    p_image = max(images.beyond_p(bound / scale, above) for bound, above in alike) if images is not None else None
    said = _said(claim, metric, diffs, step, p_seed, p_image, images)
    if max(p_seed, p_image or 0.0) < ALPHA:
        return Decision(1, f"within the margin of {margin:g} in every test; {said}", max(p_seed, p_image or 0.0))
    for bound, above in beyond:
        if all((d > bound) if above else (d < bound) for d in diffs):
            p = beyond_margin_p(diffs, bound, above, step)
            if images is not None:
                p = max(p, images.beyond_p(bound / scale, above))
            if p < ALPHA:
                who = claim.names[0] if above else claim.names[1]
                return Decision(-1, f"{who} is better by more than the margin of {margin:g} in every seed "
                                    f"(p = {p:.2g}{' on the images too' if images is not None else ''}); {said}", p)
    return Decision(0, f"neither within nor beyond the margin of {margin:g}: {said}", p_seed, "more seeds")


def _one_seed(claim: Any, images: Images, diff: float, margin: float, alike: list[tuple[float, bool]],
              beyond: list[tuple[float, bool]], scale: float) -> Decision:
    """One seed, asked for: the per-image tests alone, marked as such."""
    p = max(images.beyond_p(bound / scale, above) for bound, above in alike)
    test = f"one seed: Tango on {images.said}, difference {diff:+.3g}, p = {p:.2g} (one_seed_verdicts=true)"
    if p < ALPHA:
        return Decision(1, f"within the margin of {margin:g}; {test}", p, ONE_SEED_NEEDS)
    for bound, above in beyond:
        p_out = images.beyond_p(bound / scale, above)
        if p_out < ALPHA:
            who = claim.names[0] if above else claim.names[1]
            return Decision(-1, f"{who} is better by more than the margin of {margin:g}: {test}, beyond it p = "
                                f"{p_out:.2g}", p_out, ONE_SEED_NEEDS)
    return Decision(0, f"neither within nor beyond the margin of {margin:g}: {test}", p, ONE_SEED_NEEDS)


def _said(claim: Any, metric: Any, diffs: list[float], step: float, p_seed: float, p_image: float | None,
          images: Images | None) -> str:
    """The differences, which side is ahead, the estimate with its 90 % interval (the two one-sided tests' at 5 %)
    and the tests."""
    name = "two one-sided t-tests" if claim.relation == "parity" else "one-sided t-test"
    a, b = claim.names
    text = f"per-seed differences {', '.join(f'{d:+.3g}' for d in diffs)} ({a} - {b})"
    margin = float(claim.margin)
    for leader, lags, ahead in ((a, b, [d for d in diffs if d > 0]), (b, a, [-d for d in diffs if d < 0])):
        if len(ahead) == len(diffs):
            where = "beyond the margin in every seed" if min(ahead) > margin else "in every seed"
            text += f"; {leader} ahead of {lags} {where}, by {min(ahead):.3g} to {max(ahead):.3g}"
    text += (f"; {estimate_text(claim, metric, diffs, 0.90, step)}; {name} over {len(diffs)} seeds against the "
             f"margin p = {p_seed:.2g}")
    if p_image is not None and images is not None:
        text += f", Tango on {images.said} p = {p_image:.2g}"
    return text
