"""Which model, if any, is "best" in a table column: the leader only when it beats the runner-up significantly
(paired McNemar on the same images, else Welch's t-test across seeds, else an exact count), never inside the noise."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capsbench.util.stats import ALPHA, paired_p, welch_p


@dataclass
class Cell:
    """One model's measurements in one column: value per seed and, for accuracies, per-image outcomes per seed."""

    values: dict[int, float] = field(default_factory=dict)
    outcomes: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values())))


@dataclass(frozen=True)
class Verdict:
    best: str | None  # the row that is significantly best, or None
    runner_up: str | None
    p: float | None  # the test's p-value, None where no test applied
    test: str  # "mcnemar", "welch", "exact", or why nothing was tested


def best_row(cells: dict[str, Cell], *, higher_is_better: bool, exact: bool = False,
             excluded: frozenset[str] = frozenset()) -> Verdict:
    """The significantly best row of a column. `exact` metrics (deterministic counts such as parameters) have no
    noise, so a strict lead is enough; `excluded` rows (e.g. undertrained models) are never best nor runner-up."""
    ranked = sorted((r for r in cells if r not in excluded and cells[r].values),
                    key=lambda r: cells[r].mean, reverse=higher_is_better)
    if len(ranked) < 2:
        return Verdict(None, None, None, "fewer than two models")
    best, runner = ranked[0], ranked[1]
    a, b = cells[best], cells[runner]
    if a.mean == b.mean:
        return Verdict(None, runner, None, "tie")
    common = sorted(set(a.outcomes) & set(b.outcomes))
    if common and all(len(a.outcomes[s]) == len(b.outcomes[s]) for s in common):
        p = paired_p(np.concatenate([a.outcomes[s] for s in common]), np.concatenate([b.outcomes[s] for s in common]))
        return Verdict(best if p < ALPHA else None, runner, p, "mcnemar")
    if len(a.values) >= 2 and len(b.values) >= 2:
        p = welch_p(list(a.values.values()), list(b.values.values()))
        return Verdict(best if p < ALPHA else None, runner, p, "welch")
    if exact:
        return Verdict(best, runner, None, "exact")
    return Verdict(None, runner, None, "one seed and no paired outcomes: not testable")
