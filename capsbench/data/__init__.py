"""Dataset registry and the in-memory splits every suite consumes.

The registry (DATASETS) is importable without torch; Splits, load_splits, batches and random_shift are
imported on first use.
"""

from __future__ import annotations

from typing import Any

from capsbench.data.catalog import DATASETS, SPLIT_SEED, DatasetSpec
from capsbench.util.lazy import load

_LAZY = {
    "Splits": "capsbench.data.datasets:Splits",
    "load_splits": "capsbench.data.datasets:load_splits",
    "batches": "capsbench.data.minibatches:batches",
    "as_images": "capsbench.data.minibatches:as_images",
    "random_shift": "capsbench.data.augment:random_shift",
}


def __getattr__(name: str) -> Any:
    """Splits, load_splits, batches, as_images, random_shift: imported (with torch) on first use. Their modules are
    named
    differently from them, so importing a module never shadows the function of the same name."""
    if name in _LAZY:
        return load(_LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DATASETS", "SPLIT_SEED", "DatasetSpec", "Splits", "as_images", "batches", "load_splits", "random_shift"]
