"""The registered datasets: what their images look like, where their loaders live, and which files each needs under
data.root (and where to get them), all readable without torch."""

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
IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
NORB = tuple(f"smallnorb-5x{ids}x9x18x6x2x96x96-{split}-{kind}.mat" for ids, split in
             (("46789", "training"), ("01235", "testing")) for kind in ("dat", "cat"))


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
    files: tuple[str, ...] = ()  # what the loader reads, relative to data.root
    gzip_ok: bool = False  # each file may be there as <name>.gz instead
    download_url: str | None = None  # where data.download=true fetches the files from; None: never downloaded
    source: str = ""  # where a user gets the files by hand

    def missing_files(self, root: str | Path) -> list[Path]:
        """The files of this dataset absent under `root` (a file counts as there as <name>.gz where gzip_ok)."""
        base = Path(root)
        return [base / f for f in self.files
                if not (base / f).is_file() and not (self.gzip_ok and (base / f"{f}.gz").is_file())]


def missing_files(dataset: str, root: str | Path) -> list[Path]:
    """The files of the registered dataset `dataset` that are absent under data.root `root` (empty: all there)."""
    return DATASETS.get(dataset).missing_files(root)


DATASETS: Registry[DatasetSpec] = Registry("dataset")
DATASETS.register("mnist")(DatasetSpec(
    LazyFunction("capsbench.data.mnist:load_mnist"), 1, 28, 10, "MNIST handwritten digits (LeCun et al.), 60k/10k",
    files=tuple(f"MNIST/raw/{f}" for f in IDX), gzip_ok=True,
    download_url="https://ossci-datasets.s3.amazonaws.com/mnist/", source="http://yann.lecun.com/exdb/mnist/"))
DATASETS.register("fashion_mnist")(DatasetSpec(
    LazyFunction("capsbench.data.vision:load_fashion_mnist"), 1, 28, 10,
    "Fashion-MNIST clothing images (Xiao et al. 2017), 60k/10k", files=tuple(f"FashionMNIST/raw/{f}" for f in IDX),
    download_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    source="https://github.com/zalandoresearch/fashion-mnist"))
DATASETS.register("cifar10")(DatasetSpec(
    LazyFunction("capsbench.data.vision:load_cifar10"), 3, 32, 10, "CIFAR-10 natural images (Krizhevsky 2009), 50k/10k",
    train_pad=4, train_flip=True, min_val_accuracy=30.0,  # He et al.'s augmentation (arXiv:1512.03385, sec. 4.2)
    files=tuple(f"cifar-10-batches-py/{f}" for f in (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")),
    download_url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    source="https://www.cs.toronto.edu/~kriz/cifar.html (the python version, unpacked)"))
DATASETS.register("svhn")(DatasetSpec(
    LazyFunction("capsbench.data.vision:load_svhn"), 3, 32, 10,
    "SVHN cropped house-number digits (Netzer et al. 2011), 73k/26k",
    train_pad=4,  # mirrored digits are no longer the same digits: no flips (as Hahn et al.'s released code trains it)
    files=("SVHN/train_32x32.mat", "SVHN/test_32x32.mat"),
    download_url="http://ufldl.stanford.edu/housenumbers/", source="http://ufldl.stanford.edu/housenumbers/"))
DATASETS.register("smallnorb")(DatasetSpec(
    LazyFunction("capsbench.data.smallnorb:load_smallnorb"), 1, 48, 5,
    "smallNORB toys (LeCun et al. 2004), left image at 48x48, 32x32 crops; 24,300/24,300", train_crop=32,
    min_val_accuracy=40.0, files=tuple(f"smallNORB/{f}" for f in NORB), gzip_ok=True,
    source="https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/"))
