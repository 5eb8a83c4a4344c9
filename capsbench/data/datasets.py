"""Datasets loaded whole into memory and split into train / validation / test (the registry: data/catalog.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from capsbench.data.catalog import DATASETS, SPLIT_SEED, DatasetSpec

__all__ = ["DATASETS", "SPLIT_SEED", "DatasetSpec", "Splits", "load_splits"]


@dataclass
class Splits:
    """uint8 images (N, C, H, W) and int64 labels (N,) for each split; the test split is for reporting only."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    spec: DatasetSpec


def _head(x: torch.Tensor, y: torch.Tensor, n: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return (x, y) if n is None else (x[:n], y[:n])


def load_splits(
    name: str,
    *,
    root: Path,
    download: bool,
    val_size: int,
    train_subset: int | None = None,
    val_subset: int | None = None,
) -> Splits:
    """Load a dataset and hold out a fixed-seed validation split of its training set.

    The permutation depends only on SPLIT_SEED and the training-set size, so every run and seed
    sees the same validation images; subsets take the first n of the training and validation splits (fixed as well).
    The test split comes whole: which of its images a run measures is capsbench.data.test_subset's draw.
    """
    spec = DATASETS.get(name)
    train_x, train_y, test_x, test_y = spec.load(Path(root), download)
    if not 0 < val_size < len(train_x):
        raise ValueError(f"val_size must be in (0, {len(train_x)}), got {val_size}")
    perm = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    val_idx, train_idx = perm[:val_size], perm[val_size:]
    tx, ty = _head(train_x[train_idx], train_y[train_idx], train_subset)
    vx, vy = _head(train_x[val_idx], train_y[val_idx], val_subset)
    return Splits(name, tx, ty, vx, vy, test_x, test_y, spec)
