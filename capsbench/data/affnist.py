"""The official affNIST test set (Tieleman, https://www.cs.toronto.edu/~tijmen/affNIST/) from its MATLAB files.

Each file holds a struct `affNISTdata` whose field `image` is (1600, N) uint8, one 40x40 image per column in
row-major order, and `label_int` is (1, N) with the digit; other fields (transforms, originals) are not needed.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import torch
from scipy.io import loadmat

from capsbench.errors import CapsbenchError

log = logging.getLogger(__name__)

SIDE = 40
STRUCT = "affNISTdata"


def affnist_test_files(root: Path) -> list[Path]:
    """The test files under <root>/affNIST/: test.mat, or the batches test_batches/1.mat ... 32.mat; [] if absent."""
    base = Path(root) / "affNIST"
    single = base / "test.mat"
    if single.is_file():
        return [single]
    batches = [p for p in (base / "test_batches").glob("*.mat") if re.fullmatch(r"\d+", p.stem)]
    return sorted(batches, key=lambda p: int(p.stem))


def read_affnist_file(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, 1, 40, 40), labels int64 (N,)) from one affNIST .mat file."""
    try:
        data = loadmat(str(path), variable_names=[STRUCT])
    except (OSError, ValueError, NotImplementedError) as exc:  # scipy's errors for unreadable / v7.3 files
        raise CapsbenchError(
            f"cannot read affNIST file {path}: {exc}; expected the MATLAB files from the affNIST page"
        ) from exc
    if STRUCT not in data:
        raise CapsbenchError(
            f"{path} has no variable {STRUCT!r}: expected an affNIST .mat file (test.mat or test_batches/N.mat)"
        )
    record = data[STRUCT][0, 0]
    missing = {"image", "label_int"} - set(record.dtype.names or ())
    if missing:
        raise CapsbenchError(
            f"{path}: struct {STRUCT!r} lacks field(s) {sorted(missing)}; expected image and label_int"
        )
    image, label = np.asarray(record["image"]), np.asarray(record["label_int"]).reshape(-1)
    if image.shape[0] != SIDE * SIDE or image.shape[1] != label.shape[0]:
        raise CapsbenchError(
            f"{path}: image is {image.shape} and label_int has {label.shape[0]} entries; expected (1600, N) and N"
        )
    images = torch.from_numpy(np.ascontiguousarray(image.T.astype(np.uint8))).view(-1, 1, SIDE, SIDE)  # (N, 1, 40, 40)
    return images, torch.from_numpy(label.astype(np.int64))


def load_affnist_test(root: Path, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The real affNIST test set (first `limit` images, in file order) or None when its files are not under root."""
    files = affnist_test_files(root)
    if not files:
        return None
    xs, ys, count = [], [], 0
    for path in files:
        x, y = read_affnist_file(path)
        xs.append(x)
        ys.append(y)
        count += len(y)
        if limit is not None and count >= limit:
            break
    log.info("affNIST: read %d images from %d file(s) under %s", count, len(xs), files[0].parent)
    images, labels = torch.cat(xs), torch.cat(ys)
    return (images, labels) if limit is None else (images[:limit], labels[:limit])
