"""How a claim that A beats B is decided so that a verdict survives the training seed: A must be strictly ahead in
every seed (a tie is no lead), a t-test on the per-seed differences (their spread floored at one image in n) and,
where both were measured on the same test images, the clustered McNemar test on the per-image outcomes (each distinct
image once) must both give p < 0.05. With a `min_effect` the tests are against it: the 95 % interval of the
difference must lie above the claim's smallest meaningful difference. One seed gives at most "not resolved" unless
the user asks for one-seed verdicts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capsbench.data import DATASETS
from capsbench.util.image_tests import clustered_mcnemar_p, image_differences, tango_p
from capsbench.util.power import POWER, mcnemar_images, mcnemar_power
from capsbench.util.seed_tests import mean_interval, seed_differences_p, welch_p
from capsbench.util.stats import ALPHA

ONE_SEED_NEEDS = "seeds=[0,1,2]"
BELOW_MIN_EFFECT = "none at this protocol: the measured difference lies below the claim's min_effect"


@dataclass(frozen=True)
class Evidence:
    """What the records hold for one side of a claim: value per seed, per-image outcomes per seed, images, and which
    test draw each seed measured (None: the whole test split)."""

    values: dict[int, float]
    outcomes: dict[int, np.ndarray]
    images: int | None
    interval: tuple[float, float] | None  # one seed: its 95 % Wilson interval
    undertrained: bool = False
    draws: dict[int, str | None] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values())))

    @property
    def std(self) -> float | None:
        return float(np.std(list(self.values.values()), ddof=1)) if len(self.values) > 1 else None


@dataclass(frozen=True)
class Decision:
    """+1: the claimed side is better (supported), -1: the other side (refuted), 0: no verdict; why; the p-value
    the verdict rests on; what would resolve it."""

    direction: int
    reason: str
    p: float | None
    needs: str = ""


@dataclass(frozen=True)
class Images:
    """The per-image differences k_i (better right - worse right, summed over the seeds) of a comparison: one array
    over the distinct images when every seed measured the same draw, else one array per seed (then each test is
    the weakest seed's: an intersection-union test)."""

    groups: tuple[np.ndarray, ...]
    seeds: int  # seeds summed into each k_i

    def mcnemar_p(self) -> float:
        return max(clustered_mcnemar_p(k) for k in self.groups)

    def beyond_p(self, bound: float, above: bool) -> float:
        """One-sided p that the accuracy difference lies beyond `bound` (a fraction): Tango's test per group."""
        return max(tango_p(k, self.seeds, bound, above) for k in self.groups)

    @property
    def said(self) -> str:
        n = len(self.groups[0])
        if len(self.groups) == 1:
            return f"{n:,} distinct test images" + (f" (each once over {self.seeds} seeds)" if self.seeds > 1 else "")
        return f"{n:,} test images in each seed (different draws: the weakest seed)"


def paired_images(better: Evidence, worse: Evidence, seeds: list[int]) -> Images | None:
    """The per-image differences of `seeds`, or None where a seed lacks outcomes or the sides saw different images."""
    if not seeds or any(s not in better.outcomes or s not in worse.outcomes for s in seeds):
        return None
    if any(len(better.outcomes[s]) != len(worse.outcomes[s]) or better.draws.get(s) != worse.draws.get(s)
           for s in seeds):
        return None
    a, b = [better.outcomes[s] for s in seeds], [worse.outcomes[s] for s in seeds]
    if len({len(x) for x in a}) == 1 and len({better.draws.get(s) for s in seeds}) == 1:
        return Images((image_differences(a, b),), len(seeds))
    return Images(tuple(image_differences([x], [y]) for x, y in zip(a, b)), 1)


def resolution(claim: Any, metric: Any, better: Evidence) -> float:
    """The step of the measured differences in the metric's units: one image in n for a percentage measured on n
    images; 0 where none is known (timings, log-ratios)."""
    if metric.unit != "%" or not better.images or claim.ratio is not None:
        return 0.0
    return 100.0 / better.images


def decide(claim: Any, metric: Any, budget: str, better: Evidence, worse: Evidence, one_seed: bool,
           repeats: bool = False) -> Decision:
    """The comparison of `better` with `worse` on `metric` (a suite Metric) under the seed rule (module docstring).
    `repeats`: the suite trains nothing, so its seeds repeat one measurement (a timing) and say nothing of training."""
    sign = 1.0 if metric.higher_is_better else -1.0
    if claim.ratio is not None and min(*better.values.values(), *worse.values.values()) <= 0:
        return Decision(0, "a ratio needs positive values", None)
    offset = math.log(claim.ratio) if claim.ratio is not None else 0.0

    def score(v: float) -> float:
        return sign * (math.log(v) if claim.ratio is not None else v)

    common = sorted(set(better.values) & set(worse.values))
    step = resolution(claim, metric, better)
    if len(common) >= 2:
        diffs = [score(better.values[s]) - score(worse.values[s]) - offset for s in common]
        decision = _across_seeds(claim, metric, budget, common, diffs, step, better, worse, repeats)
    elif len(better.values) >= 2 and len(worse.values) >= 2:  # no seed measured on both sides: nothing to pair
        decision = _welch(claim, [score(v) - offset for v in better.values.values()],
                          [score(v) for v in worse.values.values()], step)
    else:
        decision = _one_seed(claim, metric, budget, better, worse, common, one_seed)
    found = power_note(claim, metric, better, worse)
    if decision.direction != 0 or decision.needs == BELOW_MIN_EFFECT or found is None:
        return decision
    said, needs = found
    return Decision(0, f"{decision.reason}; {said}", decision.p, needs or decision.needs)


def _bound(claim: Any) -> float:
    """The difference a beats claim must exceed to be supported: its min_effect (metric units), else 0."""
    return float(claim.min_effect or 0.0) if claim.ratio is None else 0.0


def estimate_text(claim: Any, metric: Any, diffs: list[float], confidence: float, step: float) -> str:
    """The mean difference and its t interval over the seeds, in the metric's units (a factor for a ratio claim)."""
    mean, interval = float(np.mean(diffs)), mean_interval(diffs, confidence, step)
    if claim.ratio is not None:
        offset = math.log(claim.ratio)
        text = f"a factor of {math.exp(mean + offset):.3g}"
        span = interval and f"{math.exp(interval[0] + offset):.3g} to {math.exp(interval[1] + offset):.3g}"
    else:
        unit = "points" if metric.unit == "%" else metric.unit
        text = f"mean difference {mean:+.3g} {unit}"
        span = interval and f"{interval[0]:+.3g} to {interval[1]:+.3g}"
    return text + (f" ({100 * confidence:.0f} % interval {span})" if span else " (no spread between seeds)")


def _across_seeds(claim: Any, metric: Any, budget: str, seeds: list[int], diffs: list[float], step: float,
                  better: Evidence, worse: Evidence, repeats: bool) -> Decision:
    """Two or more seeds on both sides: a strict lead in every seed, the t-test on the differences, the per-image
    test; against min_effect where the claim has one."""
    bound, unit = _bound(claim), "repeat" if repeats else "seed"
    images = None if claim.ratio is not None else paired_images(better, worse, seeds)
    p_seed, p_image = seed_differences_p(diffs, step, bound), None
    kind = "differences" if claim.ratio is None else f"log-ratios against {claim.ratio:g}x"
    against = f" against min_effect {bound:g}" if bound else ""
    tests = f"t-test on the per-{unit} {kind}{against} p = {p_seed:.2g}"
    if images is not None:
        p_image = min(1.0, 2 * images.beyond_p(bound / 100, above=True)) if bound else images.mcnemar_p()
        tests += f", {'Tango' if bound else 'clustered McNemar'} on {images.said}{against} p = {p_image:.2g}"
    if repeats:
        tests += (f" ({len(seeds)} repeated measurements: the seed changes nothing here, so the p-value is the "
                  "measurement's repeatability, not a sample of trained models)")
    said = f"{estimate_text(claim, metric, diffs, 0.95, step)}; {tests}"
    decision = _seed_rule(claim, budget, seeds, diffs, step, images, p_seed, p_image, said, unit)
    if decision.direction == 0 and bound and np.mean(diffs) < bound:
        return Decision(0, f"{decision.reason}; the estimate lies below the claim's min_effect of {bound:g}",
                        decision.p, BELOW_MIN_EFFECT)
    return decision


def _seed_rule(claim: Any, budget: str, seeds: list[int], diffs: list[float], step: float, images: Images | None,
               p_seed: float, p_image: float | None, said: str, unit: str) -> Decision:
    """Strictly ahead in every seed with both tests p < 0.05 (against min_effect): supported; behind in every seed
    with both tests p < 0.05 against no difference: refuted; else not resolved, saying which part failed."""
    ahead = [s for s, d in zip(seeds, diffs) if d > 0]
    behind = [s for s, d in zip(seeds, diffs) if d < 0]
    tied = [s for s, d in zip(seeds, diffs) if d == 0]
    n = len(seeds)
    if ahead and behind:
        return _more(f"the direction differs between {unit}s ({claim.names[0]} ahead in {unit}(s) "
                     f"{', '.join(map(str, ahead))}, behind in {', '.join(map(str, behind))}); {said}", p_seed)
    if tied:
        return _more(f"tied in {unit}(s) {', '.join(map(str, tied))}: a zero difference is no lead; {said}", p_seed)
    if ahead:
        p = max(p_seed, p_image or 0.0)
        if p < ALPHA and np.mean(diffs) > _bound(claim):
            return Decision(1, f"ahead in all {n} {unit}s; {said}", p)
        image_limited = p_image is not None and p_image >= ALPHA and budget != "paper"
        return _more(f"ahead in all {n} {unit}s, but not both p < {ALPHA}: {said}", p, image_limited)
    p = max(seed_differences_p(diffs, step), images.mcnemar_p() if images is not None else 0.0)  # against no difference
    if p < ALPHA:
        return Decision(-1, f"behind in all {n} {unit}s (p = {p:.2g} against no difference); {said}", p)
    return _more(f"behind in all {n} {unit}s, but not significantly: {said}", p)


def _more(reason: str, p: float, image_limited: bool = False) -> Decision:
    """Not resolved, where more seeds (or the test set's other images) could decide."""
    return Decision(0, reason, p, "more seeds" + (" or budget=paper (the full test set)" if image_limited else ""))


def _welch(claim: Any, a: list[float], b: list[float], step: float) -> Decision:
    """Seeds measured on one side only: Welch's t-test, against min_effect where the claim has one."""
    bound, lead = _bound(claim), float(np.mean(a) - np.mean(b))
    name = f"advantage of at least {claim.ratio:g}x" if claim.ratio is not None else "difference"
    if lead > 0:
        p = welch_p(a, b, step, bound)
        direction = 1 if p < ALPHA and lead > bound else 0
    else:
        p = welch_p(a, b, step)
        direction = -1 if p < ALPHA and lead < 0 else 0
    return Decision(direction, f"Welch's t-test across seeds ({name}; no seed measured on both sides), p = {p:.2g}",
                    p, "" if direction else "more seeds, the same on both sides")


def _one_seed(claim: Any, metric: Any, budget: str, better: Evidence, worse: Evidence, common: list[int],
              one_seed: bool) -> Decision:
    """One seed: the per-image test on its images, a verdict only where the user asks for one-seed verdicts."""
    images = None if claim.ratio is not None else paired_images(better, worse, common)
    if images is None:
        return Decision(0, "one seed and no per-image outcomes: not testable", None, ONE_SEED_NEEDS)
    bound, seed = _bound(claim), common[0]
    lead = (better.values[seed] - worse.values[seed]) * (1.0 if metric.higher_is_better else -1.0)
    p = min(1.0, 2 * images.beyond_p(bound / 100, above=True)) if bound and lead > 0 else images.mcnemar_p()
    test = (f"one seed: {'Tango' if bound and lead > 0 else 'McNemar'} on {images.said}"
            f"{f' against min_effect {bound:g}' if bound and lead > 0 else ''}, p = {p:.2g}")
    more = "" if budget == "paper" else " or budget=paper (the full test set)"
    if lead == 0 or p >= ALPHA or 0 < lead <= bound:
        return Decision(0, f"{test} >= {ALPHA}" if p >= ALPHA else f"{test}: no lead beyond {bound:g}", p,
                        ONE_SEED_NEEDS + more)
    if one_seed:
        return Decision(int(np.sign(lead)), f"{test} (one_seed_verdicts=true)", p, ONE_SEED_NEEDS)
    return Decision(0, f"{test}, but one seed cannot show that it holds across training seeds", p, ONE_SEED_NEEDS)


def power_note(claim: Any, metric: Any, better: Evidence, worse: Evidence) -> tuple[str, str] | None:
    """(the power the per-image comparison had, what would decide it), for accuracies measured per image: the power
    of McNemar's test on the distinct images of one draw to find the published gap (else the claim's min_effect) at
    the discordance measured; None where that does not apply."""
    if metric.unit != "%" or claim.ratio is not None or not better.images:
        return None
    pub = [s.published for s in (claim.better, claim.worse)]
    gap = abs(pub[0] - pub[1]) / 100 if None not in pub else None
    effect = gap if gap else (claim.min_effect / 100 if claim.min_effect else None)
    seeds = sorted(set(better.outcomes) & set(worse.outcomes))
    images = paired_images(better, worse, seeds)
    if not effect or images is None:
        return None
    psi = max(float(np.mean(np.concatenate(images.groups) != 0)), effect)
    n = better.images
    power = mcnemar_power(n, effect, psi)
    what = "published gap" if gap else "smallest meaningful difference (min_effect)"
    said = (f"power {power:.0%} for the {what} of {100 * effect:.3g} points with {n:,} images (discordant "
            f"{100 * psi:.3g} %)")
    if power >= POWER:
        return said + ": a gap of that size would have been found, so the true gap is smaller", "more seeds"
    needed, test_size = mcnemar_images(effect, psi), DATASETS.get(claim.dataset).test_size
    if needed > test_size:
        return said, f"more than the {test_size:,} test images for {POWER:.0%} power: more seeds, or a larger budget"
    return said, f"about {needed:,} test images per seed for {POWER:.0%} power"
