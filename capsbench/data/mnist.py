"""MNIST through torchvision: reads local files when present, downloads only when allowed."""

from __future__ import annotations

from pathlib import Path

import torch
from torchvision.datasets import MNIST

from capsbench.errors import CapsbenchError

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _present(raw: Path) -> bool:
    return all((raw / f).exists() or (raw / f"{f}.gz").exists() for f in MNIST_FILES)


def load_mnist(root: Path, download: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, test_x, test_y): uint8 images (N, 1, 28, 28) and int64 labels."""
    raw = Path(root) / "MNIST" / "raw"
    if not _present(raw) and not download:
        raise CapsbenchError(_missing_message(raw))
    try:
        train = MNIST(str(root), train=True, download=download and not _present(raw))
        test = MNIST(str(root), train=False, download=False)
    except (OSError, RuntimeError) as exc:  # torchvision raises these for failed downloads / missing files
        raise CapsbenchError(f"{_missing_message(raw)} (torchvision said: {exc})") from exc
    return train.data.unsqueeze(1), train.targets.long(), test.data.unsqueeze(1), test.targets.long()


def _missing_message(raw: Path) -> str:
    return (
        f"MNIST not found: expected {', '.join(MNIST_FILES)} in {raw}. "
        "Put the four IDX files there, or point capsbench at a directory that has MNIST/raw/ "
        "with data.root=DIR or CAPSBENCH_DATA=DIR (with internet, data.download=true fetches them)"
    )
