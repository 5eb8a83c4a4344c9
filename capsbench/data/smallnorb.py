"""smallNORB (LeCun, Huang, Bottou 2004) from the official binary-matrix files, preprocessed as in Hinton et al. 2018:
the left camera image downsampled from 96x96 to 48x48 (random 32x32 crops for training, centre crops for testing
are applied by the crop protocol)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from capsbench.errors import CapsbenchError

PREFIXES = {"train": "smallnorb-5x46789x9x18x6x2x96x96-training", "test": "smallnorb-5x01235x9x18x6x2x96x96-testing"}
MAGIC_DTYPES = {0x1E3D4C55: np.dtype("u1"), 0x1E3D4C54: np.dtype("<i4"), 0x1E3D4C56: np.dtype("<i2"),
                0x1E3D4C51: np.dtype("<f4"), 0x1E3D4C53: np.dtype("<f8")}
DOWNSAMPLED = 48


def read_binary_matrix(path: Path) -> np.ndarray:
    """One NORB binary matrix (optionally gzipped): little-endian int32 magic (element type), int32 ndim,
    max(ndim, 3) int32 dimensions (unused trailing ones are 1), then the elements in C order."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    magic, ndim = struct.unpack_from("<ii", raw, 0)
    if magic not in MAGIC_DTYPES:
        raise CapsbenchError(f"{path} is not a NORB binary matrix: magic {magic:#x}, expected one of "
                             f"{', '.join(hex(m) for m in MAGIC_DTYPES)}; re-download the official file")
    dims = struct.unpack_from(f"<{max(ndim, 3)}i", raw, 8)[:ndim]
    offset = 8 + 4 * max(ndim, 3)
    return np.frombuffer(raw, dtype=MAGIC_DTYPES[magic], count=int(np.prod(dims)), offset=offset).reshape(dims)


def _find(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            return candidate
    raise CapsbenchError(
        f"smallNORB not found: expected {name} (or {name}.gz) in {folder}. Download the training and testing "
        f"-dat and -cat files of "
        "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/ into <data.root>/smallNORB/ (torchvision has no loader)"
    )


def _split(folder: Path, prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
    images = read_binary_matrix(_find(folder, f"{prefix}-dat.mat"))  # (N, 2, 96, 96): stereo pairs
    labels = read_binary_matrix(_find(folder, f"{prefix}-cat.mat"))  # (N,) categories 0..4
    left = torch.from_numpy(images[:, :1].astype(np.float32))  # (N, 1, 96, 96)
    small = F.interpolate(left, size=(DOWNSAMPLED, DOWNSAMPLED), mode="area")  # (N, 1, 48, 48)
    return small.round().clamp(0, 255).to(torch.uint8), torch.from_numpy(labels.astype(np.int64))


def load_smallnorb(root: Path, download: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, test_x, test_y): 24,300 images each, uint8 (N, 1, 48, 48), 5 classes. Never downloads."""
    folder = Path(root) / "smallNORB"
    return (*_split(folder, PREFIXES["train"]), *_split(folder, PREFIXES["test"]))
