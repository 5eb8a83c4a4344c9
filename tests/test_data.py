"""Data: the shift augmentation, the fixed validation split, subsets beyond their split (the whole split, said once
before work), and clear errors when MNIST is missing."""

import logging

import pytest
import torch
from composing import compose
from conftest import make_splits
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config.checks import capped_subsets
from capsbench.data import load_splits, random_shift
from capsbench.errors import CapsbenchError
from capsbench.run import execute


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


def test_subsets_larger_than_their_split_take_the_whole_split(mnist_root):
    capped = load_splits("mnist", root=mnist_root, download=False, val_size=5000, train_subset=100_000,
                         val_subset=6000)
    assert capped.train_x.shape[0] == 55_000 and capped.val_x.shape[0] == 5000
    cfg = compose(["suite=accuracy", "data.train_subset=100000", "data.val_subset=6000", "data.val_size=5000"])
    assert capped_subsets(cfg.data, cfg.dataset) == [
        "data.train_subset=100000 is more than the 55,000 images mnist's training split holds after data.val_size=5000 "
        "are held out: all 55,000 are used (data.train_subset=null says so)",
        "data.val_subset=6000 is more than the 5,000 images mnist's validation split holds (data.val_size): all 5,000 "
        "are used (data.val_subset=null says so)",
    ]
    assert capped_subsets(compose(["suite=accuracy"]).data, "mnist") == []


def test_a_run_says_once_before_work_that_a_subset_takes_the_whole_split(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    with caplog.at_level(logging.WARNING, logger="capsbench"):
        result = CliRunner().invoke(app, ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1",
                                          "train.epochs=1", "models=[cnn_9x9]", "seeds=[0,1]",
                                          "tracking.enabled=false", "data.train_subset=60000",
                                          f"output_dir={tmp_path}"])
    assert result.exit_code == 0, result.output
    said = [r.getMessage() for r in caplog.records if "data.train_subset=60000" in r.getMessage()]
    assert said == ["data.train_subset=60000 is more than the 55,000 images mnist's training split holds after "
                    "data.val_size=5000 are held out: all 55,000 are used (data.train_subset=null says so)"]
