"""Data: the shift augmentation, the fixed validation split, and clear errors when MNIST is missing."""

import pytest
import torch

from capsbench.data import load_splits, random_shift
from capsbench.errors import CapsbenchError


def test_random_shift_moves_each_image_within_bounds():
    x = torch.zeros(200, 1, 28, 28)
    x[:, 0, 14, 14] = 1.0
    shifted = random_shift(x, 2, torch.Generator().manual_seed(0))
    pos = shifted[:, 0].flatten(1).argmax(1)
    dy, dx = pos // 28 - 14, pos % 28 - 14
    assert dy.abs().max() == 2 and dx.abs().max() == 2
    assert len(set(zip(dy.tolist(), dx.tolist()))) == 25  # all 5x5 offsets occur
    assert torch.equal(shifted.sum(dim=(1, 2, 3)), torch.ones(200))


def test_random_shift_zero_is_identity_and_fills_with_zeros():
    x = torch.rand(4, 3, 8, 8)
    assert torch.equal(random_shift(x, 0), x)
    out = random_shift(torch.ones(64, 1, 8, 8), 1, torch.Generator().manual_seed(1))
    assert set(out.unique().tolist()) <= {0.0, 1.0} and (out.sum(dim=(1, 2, 3)) >= 49).all()


def test_missing_mnist_offline_names_directory_and_files(tmp_path):
    with pytest.raises(CapsbenchError) as err:
        load_splits("mnist", root=tmp_path, download=False, val_size=10)
    msg = str(err.value)
    assert str(tmp_path / "MNIST" / "raw") in msg and "train-images-idx3-ubyte" in msg and "CAPSBENCH_DATA" in msg


def test_real_mnist_split_is_fixed_disjoint_and_complete(mnist_root):
    a = load_splits("mnist", root=mnist_root, download=False, val_size=5000)
    b = load_splits("mnist", root=mnist_root, download=False, val_size=5000, train_subset=100)
    assert a.train_x.shape == (55000, 1, 28, 28) and a.val_x.shape == (5000, 1, 28, 28)
    assert a.test_x.shape == (10000, 1, 28, 28) and a.test_x.dtype == torch.uint8
    assert torch.equal(a.val_x, b.val_x) and torch.equal(a.train_x[:100], b.train_x)
    # published test label counts (LeCun et al.)
    assert torch.bincount(a.test_y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    train_rows = {bytes(img.numpy().tobytes()) for img in a.train_x[:2000]}
    assert not any(bytes(img.numpy().tobytes()) in train_rows for img in a.val_x[:2000])
