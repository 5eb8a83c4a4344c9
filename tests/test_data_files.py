"""The declared data files: the same names the loaders read, which are absent under a root, where to get them."""

from pathlib import Path

import pytest

from capsbench.data import DATASETS, mnist, smallnorb, vision
from capsbench.data.files import DATA_FILES, missing_files
from capsbench.errors import CapsbenchError


def test_declared_files_are_the_loaders_files():
    assert set(DATASETS) <= set(DATA_FILES)
    assert DATA_FILES["mnist"].files == mnist.MNIST_FILES
    assert DATA_FILES["fashion_mnist"].files == vision.FASHION_FILES
    assert DATA_FILES["cifar10"].files == vision.CIFAR_FILES
    assert DATA_FILES["svhn"].files == vision.SVHN_FILES
    assert DATA_FILES["smallnorb"].files == tuple(
        f"{smallnorb.PREFIXES[split]}-{part}.mat" for split in ("train", "test") for part in ("dat", "cat")
    )


def test_missing_files_are_listed_until_present(tmp_path: Path):
    assert [p.name for p in missing_files("svhn", tmp_path)] == ["train_32x32.mat", "test_32x32.mat"]
    (tmp_path / "SVHN").mkdir()
    (tmp_path / "SVHN" / "train_32x32.mat").write_bytes(b"x")
    assert missing_files("svhn", tmp_path) == [tmp_path / "SVHN" / "test_32x32.mat"]
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in DATA_FILES["mnist"].files:  # MNIST may be gzipped
        (raw / f"{name}.gz").write_bytes(b"x")
    assert missing_files("mnist", tmp_path) == []
    with pytest.raises(CapsbenchError, match="no declared files for data 'mnsit'"):
        missing_files("mnsit", tmp_path)


def test_affnist_needs_test_mat_or_all_32_batches(tmp_path: Path):
    assert missing_files("affnist", tmp_path) == [tmp_path / "affNIST" / "test.mat"]
    batches = tmp_path / "affNIST" / "test_batches"
    batches.mkdir(parents=True)
    for i in range(1, 32):
        (batches / f"{i}.mat").write_bytes(b"x")
    assert missing_files("affnist", tmp_path) == [tmp_path / "affNIST" / "test.mat"]  # batch 32 is absent
    (batches / "32.mat").write_bytes(b"x")
    assert missing_files("affnist", tmp_path) == []
    assert "tijmen/affNIST" in DATA_FILES["affnist"].how_to_get(tmp_path)


def test_where_to_get_names_torchvision_where_it_downloads(tmp_path: Path):
    assert "CIFAR10('" in DATA_FILES["cifar10"].how_to_get(tmp_path) and str(tmp_path) in DATA_FILES[
        "cifar10"
    ].how_to_get(tmp_path)
    assert "torchvision" not in DATA_FILES["smallnorb"].how_to_get(tmp_path)


def test_the_real_mnist_and_fashion_mnist_are_complete_and_whole(mnist_root: Path):
    assert missing_files("mnist", mnist_root) == [] and DATA_FILES["mnist"].damaged(mnist_root) == []
    if not (mnist_root / "FashionMNIST").is_dir():
        pytest.skip("real Fashion-MNIST not found")
    assert missing_files("fashion_mnist", mnist_root) == [] and DATA_FILES["fashion_mnist"].damaged(mnist_root) == []
