"""How a claim's two models are compared so that a verdict survives the training seed: the claimed direction must
hold in every seed, a t-test on the per-seed differences (whose spread is the variance between training seeds) and,
where both were measured on the same test images, McNemar on the pooled per-image outcomes (the image sample) must
both give p < 0.05. One seed gives at most "not resolved" unless the user asks for one-seed verdicts. Exact counts
(parameters, MACs) do not depend on the seed: their difference is the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from capsbench.data import DATASETS
from capsbench.util.power import POWER, mcnemar_images, mcnemar_power
from capsbench.util.stats import ALPHA, paired_p, seed_differences_p, welch_p

ONE_SEED_NEEDS = "seeds=[0,1,2]"


@dataclass(frozen=True)
class Evidence:
    """What the records hold for one side of a claim: value per seed, per-image outcomes per seed, images."""

    values: dict[int, float]
    outcomes: dict[int, np.ndarray]
    images: int | None
    interval: tuple[float, float] | None  # one seed: its 95 % Wilson interval
    undertrained: bool = False

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


def decide(claim: Any, metric: Any, budget: str, better: Evidence, worse: Evidence, one_seed: bool) -> Decision:
    """The comparison of `better` with `worse` on `metric` (a suite Metric) under the seed rule (module docstring);
    a comparison left undecided says the power it had and what would decide it."""
    decision = _decide(claim, metric, budget, better, worse, one_seed)
    if decision.direction != 0:
        return decision
    found = power_note(claim, metric, better, worse)
    if found is None:
        return decision
    said, needs = found
    return Decision(0, f"{decision.reason}; {said}", decision.p, needs or decision.needs)


def power_note(claim: Any, metric: Any, better: Evidence, worse: Evidence) -> tuple[str, str] | None:
    """(the power the per-seed paired comparison had, what would decide it), for accuracies measured per image:
    the power of McNemar's test on the images of one seed to find the published gap (else the claim's min_effect) at
    the discordance measured; None where that does not apply."""
    if metric.exact or metric.unit != "%" or claim.ratio is not None or not better.images:
        return None
    pub = [s.published for s in (claim.better, claim.worse)]
    gap = abs(pub[0] - pub[1]) / 100 if None not in pub else None
    effect = gap if gap else (claim.min_effect / 100 if claim.min_effect else None)
    if not effect:
        return None
    seeds = sorted(set(better.outcomes) & set(worse.outcomes))
    a = np.concatenate([better.outcomes[s] for s in seeds]) if seeds else None
    b = np.concatenate([worse.outcomes[s] for s in seeds]) if seeds else None
    if a is None or len(a) != len(b):
        return None
    psi = max(float(np.mean(a != b)), effect)
    n = better.images
    power = mcnemar_power(n, effect, psi)
    what = "published gap" if gap else "smallest meaningful difference (min_effect)"
    said = (f"power {power:.0%} for the {what} of {100 * effect:.3g} points with {n:,} images per seed (discordant "
            f"{100 * psi:.3g} %)")
    if power >= POWER:
        return said + ": a gap of that size would have been found, so the true gap is smaller", "more seeds"
    needed, test_size = mcnemar_images(effect, psi), DATASETS.get(claim.dataset).test_size
    if needed > test_size:
        return said, f"more than the {test_size:,} test images for {POWER:.0%} power: more seeds, or a larger budget"
    return said, f"about {needed:,} test images per seed for {POWER:.0%} power"


def _decide(claim: Any, metric: Any, budget: str, better: Evidence, worse: Evidence, one_seed: bool) -> Decision:
    sign = 1.0 if metric.higher_is_better else -1.0
    if claim.ratio is not None and min(*better.values.values(), *worse.values.values()) <= 0:
        return Decision(0, "a ratio needs positive values", None)
    offset = math.log(claim.ratio) if claim.ratio is not None else 0.0
    name = f"advantage of at least {claim.ratio:g}x" if claim.ratio is not None else "difference"

    def score(v: float) -> float:
        return sign * (math.log(v) if claim.ratio is not None else v)

    if metric.exact:
        lead = float(np.mean([score(v) for v in better.values.values()])
                     - np.mean([score(v) for v in worse.values.values()]) - offset)
        return Decision(int(np.sign(lead)), f"exact count ({name}; counts do not depend on the seed)",
                        0.0 if lead else 1.0)
    common = sorted(set(better.values) & set(worse.values))
    pooled = None if claim.ratio is not None else _pooled_mcnemar(better, worse, common)
    if len(common) >= 2:
        diffs = [score(better.values[s]) - score(worse.values[s]) - offset for s in common]
        return _across_seeds(claim, name, budget, common, diffs, pooled)
    if len(better.values) >= 2 and len(worse.values) >= 2:  # no seed measured on both sides: nothing to pair
        a = [score(v) - offset for v in better.values.values()]
        b = [score(v) for v in worse.values.values()]
        p, lead = welch_p(a, b), float(np.mean(a) - np.mean(b))
        direction = int(np.sign(lead)) if p < ALPHA else 0
        return Decision(direction, f"Welch's t-test across seeds ({name}; no seed measured on both sides), "
                                   f"p = {p:.2g}", p, "" if direction else "more seeds, the same on both sides")
    if pooled is None:
        return Decision(0, "one seed and no per-image outcomes: not testable", None, ONE_SEED_NEEDS)
    n, p = pooled
    lead = score(better.values[common[0]]) - score(worse.values[common[0]])
    test = f"one seed: paired McNemar on {n:,} test images, p = {p:.2g}"
    if p >= ALPHA or lead == 0:
        more = "" if budget == "paper" else " or budget=paper (the full test set)"
        return Decision(0, f"{test} >= {ALPHA}", p, ONE_SEED_NEEDS + more)
    if one_seed:
        return Decision(int(np.sign(lead)), f"{test} (one_seed_verdicts=true)", p, ONE_SEED_NEEDS)
    return Decision(0, f"{test}, but one seed cannot show that it holds across training seeds", p, ONE_SEED_NEEDS)


def _across_seeds(
    claim: Any, name: str, budget: str, seeds: list[int], diffs: list[float], pooled: tuple[int, float] | None
) -> Decision:
    """Two or more seeds on both sides: direction in every seed, t-test on the differences, pooled McNemar."""
    p_seed = seed_differences_p(diffs)
    per_seed = "differences" if claim.ratio is None else f"log-ratios against {claim.ratio:g}x"
    tests = f"t-test on the per-seed {per_seed} p = {p_seed:.2g}"
    if pooled is not None:
        tests += f", paired McNemar on {pooled[0]:,} pooled test images p = {pooled[1]:.2g}"
    ahead = [s for s, d in zip(seeds, diffs) if d > 0]
    behind = [s for s, d in zip(seeds, diffs) if d < 0]
    claimed = claim.better.model
    if ahead and behind:
        return Decision(0, f"the direction differs between seeds ({claimed} ahead in seed(s) "
                           f"{', '.join(map(str, ahead))}, behind in {', '.join(map(str, behind))}); {tests}",
                        p_seed, "more seeds")
    if not ahead and not behind:
        return Decision(0, f"no difference in any of {len(seeds)} seeds; {tests}", p_seed, "more seeds")
    p = max(p_seed, pooled[1] if pooled is not None else 0.0)
    if p < ALPHA:
        return Decision(1 if ahead else -1, f"same direction in all {len(seeds)} seeds; {tests}", p)
    image_limited = pooled is not None and pooled[1] >= ALPHA and budget != "paper"
    return Decision(0, f"same direction in all {len(seeds)} seeds, but not both p < {ALPHA}: {tests}", p,
                    "more seeds" + (" or budget=paper (the full test set)" if image_limited else ""))


def _pooled_mcnemar(better: Evidence, worse: Evidence, seeds: list[int]) -> tuple[int, float] | None:
    """(images, p) of McNemar on the per-image outcomes of every common seed concatenated, or None when a seed lacks
    them or the sides were measured on different images."""
    if not seeds or any(s not in better.outcomes or s not in worse.outcomes for s in seeds):
        return None
    if any(len(better.outcomes[s]) != len(worse.outcomes[s]) for s in seeds):
        return None
    a = np.concatenate([better.outcomes[s] for s in seeds])
    b = np.concatenate([worse.outcomes[s] for s in seeds])
    return len(a), paired_p(a, b)
