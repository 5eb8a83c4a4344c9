"""Registered datasets, loaded whole into memory and split into train / validation / test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from capsbench.data.mnist import load_mnist
from capsbench.data.smallnorb import load_smallnorb
from capsbench.data.vision import load_cifar10, load_fashion_mnist, load_svhn
from capsbench.registry import Registry

SPLIT_SEED = 12345  # fixed for every run and every training seed: the validation split never moves


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: how to load its raw splits and what its images look like."""

    load: Callable[[Path, bool], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
    in_channels: int
    image_size: int
    num_classes: int
    description: str
    train_crop: int | None = None  # random crops of this size for training, centre crops for evaluation
    # % validation accuracy below which a trained model counts as undertrained and is never compared: far above
    # chance (10 % for ten classes, 20 % for smallNORB), far below what any budget's training reaches.
    min_val_accuracy: float = 50.0


DATASETS: Registry[DatasetSpec] = Registry("dataset")
DATASETS.register("mnist")(DatasetSpec(load_mnist, 1, 28, 10, "MNIST handwritten digits (LeCun et al.), 60k/10k"))
DATASETS.register("fashion_mnist")(DatasetSpec(
    load_fashion_mnist, 1, 28, 10, "Fashion-MNIST clothing images (Xiao et al. 2017), 60k/10k"))
DATASETS.register("cifar10")(DatasetSpec(load_cifar10, 3, 32, 10, "CIFAR-10 natural images (Krizhevsky 2009), 50k/10k",
                                         min_val_accuracy=30.0))
DATASETS.register("svhn")(DatasetSpec(load_svhn, 3, 32, 10, "SVHN cropped house-number digits (Netzer et al. 2011), 73k/26k"))
DATASETS.register("smallnorb")(DatasetSpec(
    load_smallnorb, 1, 48, 5, "smallNORB toys (LeCun et al. 2004), left image at 48x48, 32x32 crops; 24,300/24,300",
    train_crop=32, min_val_accuracy=40.0))


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
    test_subset: int | None = None,
) -> Splits:
    """Load a dataset and hold out a fixed-seed validation split of its training set.

    The permutation depends only on SPLIT_SEED and the training-set size, so every run and seed
    sees the same validation images; subsets take the first n of each split (fixed as well).
    """
    spec = DATASETS.get(name)
    train_x, train_y, test_x, test_y = spec.load(Path(root), download)
    if not 0 < val_size < len(train_x):
        raise ValueError(f"val_size must be in (0, {len(train_x)}), got {val_size}")
    perm = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    val_idx, train_idx = perm[:val_size], perm[val_size:]
    tx, ty = _head(train_x[train_idx], train_y[train_idx], train_subset)
    vx, vy = _head(train_x[val_idx], train_y[val_idx], val_subset)
    sx, sy = _head(test_x, test_y, test_subset)
    return Splits(name, tx, ty, vx, vy, sx, sy, spec)
