"""The registered datasets: what their images look like and where their loaders live, readable without torch (the
files each reads: capsbench.data.files)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capsbench.util.lazy import LazyFunction
from capsbench.util.registry import Registry

if TYPE_CHECKING:
    import torch

SPLIT_SEED = 12345  # fixed for every run and every training seed: the validation split never moves
TEST_DRAWS = ("stratified", "head")  # how data.test_subset images are drawn (capsbench.data.test_subset)


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: how to load its raw splits and what its images look like."""

    load: Callable[[Path, bool], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
    in_channels: int
    image_size: int
    num_classes: int
    description: str
    train_crop: int | None = None  # random crops of this size for training, centre crops for evaluation
    train_pad: int = 0  # > 0: training images zero-padded by this many pixels, then randomly cropped to their size
    train_flip: bool = False  # training images mirrored left-right with probability 1/2 (with train_pad)
    # % validation accuracy below which a trained model counts as undertrained and is never compared: far above
    # chance (10 % for ten classes, 20 % for smallNORB), far below what any budget's training reaches.
    min_val_accuracy: float = 50.0
    # The official splits' sizes (training before the validation split is held out, test; default: MNIST's): the
    # declared work of the progress bars' time left, known before any data is loaded.
    train_size: int = 60_000
    test_size: int = 10_000


DATASETS: Registry[DatasetSpec] = Registry("dataset")
DATASETS.register("mnist")(DatasetSpec(
    LazyFunction("capsbench.data.mnist:load_mnist"), 1, 28, 10, "MNIST handwritten digits (LeCun et al.), 60k/10k"))
DATASETS.register("fashion_mnist")(DatasetSpec(
    LazyFunction("capsbench.data.vision:load_fashion_mnist"), 1, 28, 10,
    "Fashion-MNIST clothing images (Xiao et al. 2017), 60k/10k"))
DATASETS.register("cifar10")(DatasetSpec(
    LazyFunction("capsbench.data.vision:load_cifar10"), 3, 32, 10, "CIFAR-10 natural images (Krizhevsky 2009), 50k/10k",
    train_pad=4, train_flip=True, min_val_accuracy=30.0,  # He et al.'s augmentation (arXiv:1512.03385, sec. 4.2)
    train_size=50_000))
DATASETS.register("svhn")(DatasetSpec(
    LazyFunction("capsbench.data.vision:load_svhn"), 3, 32, 10,
    "SVHN cropped house-number digits (Netzer et al. 2011), 73k/26k",
    train_pad=4,  # mirrored digits are no longer the same digits: no flips (as Hahn et al.'s released code trains it)
    train_size=73_257, test_size=26_032))
DATASETS.register("smallnorb")(DatasetSpec(
    LazyFunction("capsbench.data.smallnorb:load_smallnorb"), 1, 48, 5,
    "smallNORB toys (LeCun et al. 2004), left image at 48x48, 32x32 crops; 24,300/24,300", train_crop=32,
    min_val_accuracy=40.0, train_size=24_300, test_size=24_300))
