"""Which test images a run measures when it takes fewer than all: a seeded, class-stratified random draw (or the first
n, to reproduce an old table), the same for every model, seed and run of that size, named by the hash of its indices.

MNIST's test file is ordered: its first 5,000 images come from NIST's training writers and are cleaner and easier
than the last 5,000, so the first n of it is no sample of the test set.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from capsbench.data.catalog import TEST_DRAWS
from capsbench.data.datasets import Splits


@dataclass(frozen=True)
class SubsetDraw:
    """The drawn images: indices into the test split (ascending), how they were drawn, and their hash."""

    indices: np.ndarray  # (n,) int64, ascending
    of: int  # size of the test split drawn from
    draw: str  # stratified | head
    seed: int | None  # the draw's seed (None for head)

    @property
    def sha256(self) -> str:
        """The first 12 hex digits of the SHA-256 of the indices as little-endian int64: the draw's identity."""
        return hashlib.sha256(self.indices.astype("<i8").tobytes()).hexdigest()[:12]

    def columns(self) -> dict[str, object]:
        """The record columns that name these images."""
        return {"test_draw": self.draw, "test_subset_seed": self.seed, "test_subset_sha256": self.sha256}

def draw_test_subset(labels: np.ndarray, n: int, *, draw: str = "stratified", seed: int = 0) -> SubsetDraw:
    """`n` of the test images with these labels (`n` >= the split: all of them, in order).

    stratified: each class gets its share of `n` by largest remainder, drawn uniformly without replacement by a
    generator seeded with `seed` alone, so the same (n, seed) picks the same images for every model, training seed
    and run; head: the first n.
    """
    labels = np.asarray(labels)
    total = len(labels)
    if draw not in TEST_DRAWS:
        raise ValueError(f"draw must be one of {', '.join(TEST_DRAWS)}, got {draw!r}")
    if n >= total:
        return SubsetDraw(np.arange(total, dtype=np.int64), total, "all", None)
    if draw == "head":
        return SubsetDraw(np.arange(n, dtype=np.int64), total, "head", None)
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * n / total
    share = np.floor(quota).astype(np.int64)
    order = np.argsort(-(quota - share), kind="stable")  # largest remainders first, ties by class
    share[order[: n - int(share.sum())]] += 1
    rng = np.random.default_rng(seed)
    picked = [rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, share)]
    return SubsetDraw(np.sort(np.concatenate(picked)).astype(np.int64), total, "stratified", seed)


@dataclass
class DrawnSplits(Splits):
    """Splits whose test split is a drawn subset, with the draw that chose it."""

    draw: SubsetDraw | None = None


def with_test_subset(splits: Splits, n: int | None, *, draw: str, seed: int) -> Splits:
    """The splits with their test split reduced to the drawn `n` images (None, or the whole split: unchanged)."""
    drawn = draw_test_subset(splits.test_y.numpy(), len(splits.test_y) if n is None else n, draw=draw, seed=seed)
    if drawn.draw == "all":
        return splits
    index = torch.from_numpy(drawn.indices)
    fields = {f.name: getattr(splits, f.name) for f in dataclasses.fields(splits)}
    return DrawnSplits(**{**fields, "test_x": splits.test_x[index], "test_y": splits.test_y[index]}, draw=drawn)
