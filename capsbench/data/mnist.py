"""MNIST (and Fashion-MNIST, in the same IDX format) read from the local files, raw or gzipped, each checked as it is
read; torchvision downloads missing ones only when allowed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torchvision.datasets import MNIST

from capsbench.data.files import DATA_FILES, fetch_missing
from capsbench.data.idx import read_idx

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
IMAGE_SIZE = 28


def load_mnist(root: Path, download: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, test_x, test_y): uint8 images (N, 1, 28, 28) and int64 labels."""
    return load_idx_dataset("mnist", Path(root), download, MNIST_FILES,
                            lambda: MNIST(str(root), train=True, download=True))


def load_idx_dataset(
    name: str, root: Path, download: bool, files: tuple[str, ...], fetch: Callable[[], object]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dataset `name`'s four IDX `files` (training images and labels, then test ones) under root, fetched first where
    missing and allowed (capsbench.data.files.fetch_missing): uint8 images (N, 1, 28, 28) and int64 labels."""
    fetch_missing(name, root, download=download, fetch=fetch)
    spec = DATA_FILES[name]
    arrays = []
    for file in files:
        images = "images" in file
        path = root / spec.folder / file
        data = read_idx(spec.read_path(path) or path, (None, IMAGE_SIZE, IMAGE_SIZE) if images else (None,))
        values = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        arrays.append(values.view(-1, 1, IMAGE_SIZE, IMAGE_SIZE) if images else values.long())
    return arrays[0], arrays[1], arrays[2], arrays[3]
