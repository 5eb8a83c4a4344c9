"""The per-image worst case over attacks and eps, as RobustBench reports it: an image is broken at eps when any
attack broke it at eps or at any smaller eps (the smaller L-inf ball lies inside the larger), so the robust accuracy
it gives is never above any single attack's and is monotone in eps by construction."""

from __future__ import annotations

import numpy as np


def worst_case_broken(broken: dict[str, dict[float, np.ndarray]], grid: list[float], n: int) -> dict[float, np.ndarray]:
    """broken[attack][eps] (n,) bool, for the eps each attack ran at -> per eps of `grid` (n,) bool."""
    so_far = np.zeros(n, dtype=bool)
    out = {}
    for eps in sorted(grid):
        for per_eps in broken.values():
            for e, mask in per_eps.items():
                if e <= eps:
                    so_far = so_far | np.asarray(mask, dtype=bool)
        out[eps] = so_far.copy()
    return out
