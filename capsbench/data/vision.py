"""Fashion-MNIST, CIFAR-10 and SVHN from their official on-disk formats (torchvision downloads them when allowed)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import scipy.io
import torch
from torchvision.datasets import CIFAR10, SVHN, FashionMNIST

from capsbench.data.files import fetch_missing
from capsbench.data.mnist import load_idx_dataset

Arrays = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
FASHION_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
CIFAR_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")


def load_fashion_mnist(root: Path, download: bool) -> Arrays:
    """Fashion-MNIST (Xiao et al. 2017) from the IDX files in <root>/FashionMNIST/raw/: 60k/10k, (N, 1, 28, 28)."""
    return load_idx_dataset("fashion_mnist", Path(root), download, FASHION_FILES,
                            lambda: FashionMNIST(str(root), train=True, download=True))


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as fh:
        entry = pickle.load(fh, encoding="latin1")  # the official batches are Python 2 pickles
    return np.asarray(entry["data"], dtype=np.uint8), np.asarray(entry["labels"], dtype=np.int64)


def load_cifar10(root: Path, download: bool) -> Arrays:
    """CIFAR-10 (Krizhevsky 2009) from the python pickles in <root>/cifar-10-batches-py/: 50k/10k, (N, 3, 32, 32)."""
    folder = Path(root) / "cifar-10-batches-py"
    fetch_missing("cifar10", Path(root), download=download, fetch=lambda: CIFAR10(str(root), train=True, download=True))
    parts = [_cifar_batch(folder / f) for f in CIFAR_FILES]
    train_x = np.concatenate([x for x, _ in parts[:5]]).reshape(-1, 3, 32, 32)  # rows are R, G, B planes
    train_y = np.concatenate([y for _, y in parts[:5]])
    test_x, test_y = parts[5][0].reshape(-1, 3, 32, 32), parts[5][1]
    return torch.from_numpy(train_x), torch.from_numpy(train_y), torch.from_numpy(test_x), torch.from_numpy(test_y)


def _svhn_split(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    mat = scipy.io.loadmat(str(path))
    x = np.ascontiguousarray(np.transpose(mat["X"], (3, 2, 0, 1)))  # (32, 32, 3, N) -> (N, 3, 32, 32)
    y = mat["y"].astype(np.int64).reshape(-1)
    y[y == 10] = 0  # the official files label the digit 0 as 10
    return torch.from_numpy(x), torch.from_numpy(y)


def load_svhn(root: Path, download: bool) -> Arrays:
    """SVHN cropped digits (Netzer et al. 2011) from <root>/SVHN/{train,test}_32x32.mat: 73,257/26,032, (N, 3, 32,
    32)."""
    folder = Path(root) / "SVHN"
    fetch_missing("svhn", Path(root), download=download,
                  fetch=lambda: [SVHN(str(folder), split=split, download=True) for split in ("train", "test")])
    return (*_svhn_split(folder / SVHN_FILES[0]), *_svhn_split(folder / SVHN_FILES[1]))
