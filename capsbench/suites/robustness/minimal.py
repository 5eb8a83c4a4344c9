"""Each image's smallest adversarial perturbation (params.minimal): the minimum-norm attacks' distances, bounded by the
fixed-eps attacks (an image the worst case broke at eps has a smallest perturbation of at most eps), the per-image
minimum over both; the median with its interval, the robustness curve (accuracy at every radius up to the grid's
largest), which attack found each image's smallest, and the images where the minimum-norm attacks were too weak."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from capsbench.attacks import WORST_CASE
from capsbench.suites.robustness.phases import UnitAttacks
from capsbench.util.stats import accuracy_fields, distance_fields

CURVE_POINTS = 41  # radii of the robustness curve, from 0 to the grid's largest eps
TOO_WEAK = 1.02  # a minimum-norm distance above 1.02 x the eps at which the fixed-eps attacks broke the image


def ensemble_bound(worst: dict[float, np.ndarray], clean_ok: np.ndarray) -> np.ndarray:
    """(N,) per image the smallest grid eps at which the worst case broke it (inf: robust at every eps; 0: wrong
    clean)."""
    bound = np.full(len(clean_ok), np.inf)
    for eps in sorted(worst, reverse=True):
        bound[worst[eps]] = eps
    bound[~clean_ok] = 0.0
    return bound


def minimal_records(run: UnitAttacks, names: list[str], worst: dict[float, np.ndarray], grid: list[float],
                    progress: Callable[[str], Callable[[int, int, int], None]] | None = None
                    ) -> list[dict[str, Any]]:
    """The minimum-norm attacks `names` on every clean-correct image and the records of the smallest perturbations
    (see module docstring); progress(name) follows attack `name` (images done, images, images left)."""
    ok = run.clean_ok
    index = torch.from_numpy(np.nonzero(ok)[0]).to(run.images.device)
    bound = ensemble_bound(worst, ok)
    found: dict[str, np.ndarray] = {}
    for name in names:
        d = np.zeros(len(ok))
        if len(index):
            d[ok] = run.minimal(name, index, progress(name) if progress else None).cpu().numpy()
        found[name] = d
    best_attack = np.minimum.reduce(list(found.values())) if found else np.full(len(ok), np.inf)
    distance = np.minimum(best_attack, bound)
    records: list[dict[str, Any]] = [{"metric": "minimal_distance", "attack": WORST_CASE, **distance_fields(distance)}]
    records += [{"metric": "minimal_distance", "attack": n, **distance_fields(d)} for n, d in found.items()]
    for name, d in found.items():  # the images whose smallest perturbation this attack found (ties: every finder)
        records.append({"metric": "minimal_found", "attack": name,
                        **accuracy_fields(ok & np.isfinite(d) & (d <= distance))})
    records.append({"metric": "minimal_found", "attack": "fixed_eps",
                    **accuracy_fields(ok & np.isfinite(bound) & (bound < best_attack))})
    weak = ok & np.isfinite(bound) & (best_attack > TOO_WEAK * bound)
    records.append({"metric": "minimal_too_weak", "value": float(weak.sum()), "n": int(ok.sum())})
    for r in np.linspace(0.0, max(grid), CURVE_POINTS):
        records.append({"metric": "minimal_accuracy", "eps": round(float(r), 6), **accuracy_fields(distance > r)})
    return records
