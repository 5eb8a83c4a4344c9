"""Which model, if any, is "best" in a table column: the leader only when it beats the runner-up under the seed rule,
the one rule for "better" in tables, claims and words: a strict lead in every training seed (a tie is no lead), a
t-test on the per-seed differences (their spread floored at one image in n) gives p < 0.05 and, where both were
measured on the same images, the clustered McNemar test on the per-image outcomes (each distinct image once; for a
per-image value such as a distance, the signed-rank test on each image's mean over the seeds) too. One
seed compares trained instances (these weights on these images), not architectures: nothing is best. Exact counts
(parameters, MACs) have no noise: a strict lead is enough."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capsbench.util.image_tests import clustered_mcnemar_p, image_differences, signed_rank_p
from capsbench.util.seed_tests import seed_differences_p, welch_p
from capsbench.util.stats import ALPHA


@dataclass
class Cell:
    """One model's measurements in one column: value per seed and, for accuracies, per-image outcomes per seed."""

    values: dict[int, float] = field(default_factory=dict)
    outcomes: dict[int, np.ndarray] = field(default_factory=dict)
    per_image: dict[int, np.ndarray] = field(default_factory=dict)  # a continuous per-image value (a distance)

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values())))


@dataclass(frozen=True)
class Verdict:
    best: str | None  # the row that is significantly best, or None
    runner_up: str | None
    p: float | None  # the test's p-value, None where no test applied
    test: str  # "seeds" (the seed rule), "welch", "exact", or why nothing was tested


def best_row(cells: dict[str, Cell], *, higher_is_better: bool, exact: bool = False,
             excluded: frozenset[str] = frozenset()) -> Verdict:
    """The best row of a column under the seed rule (module docstring); `excluded` rows (e.g. undertrained models)
    are never best nor runner-up."""
    ranked = sorted((r for r in cells if r not in excluded and cells[r].values),
                    key=lambda r: cells[r].mean, reverse=higher_is_better)
    if len(ranked) < 2:
        return Verdict(None, None, None, "fewer than two models")
    best, runner = ranked[0], ranked[1]
    a, b = cells[best], cells[runner]
    if a.mean == b.mean:
        return Verdict(None, runner, None, "tie")
    if exact:
        return Verdict(best, runner, None, "exact")
    common = sorted(set(a.values) & set(b.values))
    sizes = {len(c.outcomes[s]) for c in (a, b) for s in c.outcomes}
    step = 100.0 / sizes.pop() if len(sizes) == 1 else 0.0  # an accuracy (%) on n images moves in steps of one image
    if len(common) < 2:
        if len(a.values) >= 2 and len(b.values) >= 2:  # seeds measured on one side only: nothing to pair
            p = welch_p(list(a.values.values()), list(b.values.values()), step)
            return Verdict(best if p < ALPHA else None, runner, p, "welch")
        return Verdict(None, runner, None, "one seed: trained instances, not architectures")
    sign = 1.0 if higher_is_better else -1.0
    diffs = [sign * (a.values[s] - b.values[s]) for s in common]
    if any(d < 0 for d in diffs):
        return Verdict(None, runner, None, "the direction differs between seeds")
    if any(d == 0 for d in diffs):
        return Verdict(None, runner, None, "a seed ties: a zero difference is no lead")
    p = seed_differences_p(diffs, step)
    if all(s in a.outcomes and s in b.outcomes for s in common) and step:
        p = max(p, clustered_mcnemar_p(image_differences([a.outcomes[s] for s in common],
                                                         [b.outcomes[s] for s in common])))
    elif all(s in a.per_image and s in b.per_image and len(a.per_image[s]) == len(b.per_image[s]) for s in common):
        p = max(p, signed_rank_p([a.per_image[s] for s in common], [b.per_image[s] for s in common]))
    return Verdict(best if p < ALPHA else None, runner, p, "seeds")
