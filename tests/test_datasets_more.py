"""Fashion-MNIST, CIFAR-10, SVHN and smallNORB loaders on tiny fixtures written in the official formats; crops."""

import gzip
import pickle
import struct

import numpy as np
import pytest
import scipy.io
import torch

from capsbench.data import DATASETS, load_splits
from capsbench.data.smallnorb import PREFIXES, read_binary_matrix
from capsbench.errors import CapsbenchError
from capsbench.train.protocols import RandomCropProtocol, TrainingProtocol, dataset_protocol


def write_idx(path, array: np.ndarray) -> None:
    magic = {3: 0x0803, 1: 0x0801}[array.ndim]  # unsigned bytes, 3-D images or 1-D labels (big-endian header)
    path.write_bytes(struct.pack(f">{1 + array.ndim}i", magic, *array.shape) + array.astype(np.uint8).tobytes())


def test_fashion_mnist_reads_idx_files(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("t10k", 5)):
        write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    train_x, train_y, test_x, test_y = DATASETS.get("fashion_mnist").load(tmp_path, False)
    assert train_x.shape == (12, 1, 28, 28) and test_x.shape == (5, 1, 28, 28) and train_x.dtype == torch.uint8
    assert train_y.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    expected = np.frombuffer((raw / "t10k-images-idx3-ubyte").read_bytes()[16:], dtype=np.uint8).reshape(5, 28, 28)
    assert np.array_equal(test_x[:, 0].numpy(), expected)


def test_cifar10_reads_python_pickles(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        data = np.zeros((2, 3072), dtype=np.uint8)
        data[0, 1024 + 5] = 200 + i  # green plane, row 0, column 5 of the first image
        with open(folder / name, "wb") as fh:
            pickle.dump(
                {"batch_label": name, "data": data, "labels": [i, 9 - i], "filenames": ["a", "b"]}, fh, protocol=2
            )
    train_x, train_y, test_x, test_y = DATASETS.get("cifar10").load(tmp_path, False)
    assert train_x.shape == (10, 3, 32, 32) and test_x.shape == (2, 3, 32, 32)
    assert train_y.tolist() == [0, 9, 1, 8, 2, 7, 3, 6, 4, 5] and test_y.tolist() == [5, 4]
    assert train_x[2, 1, 0, 5] == 201 and train_x[2].sum() == 201 and test_x[0, 1, 0, 5] == 205


def test_svhn_reads_mat_files_and_maps_label_10_to_0(tmp_path):
    folder = tmp_path / "SVHN"
    folder.mkdir()
    for split, n in (("train", 4), ("test", 3)):
        x = np.zeros((32, 32, 3, n), dtype=np.uint8)
        x[1, 2, 0, 0] = 77  # row 1, column 2, red, image 0
        y = np.array([[10], [1], [2], [3]][:n], dtype=np.uint8)
        scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})
    train_x, train_y, test_x, test_y = DATASETS.get("svhn").load(tmp_path, False)
    assert train_x.shape == (4, 3, 32, 32) and test_x.shape == (3, 3, 32, 32)
    assert train_y.tolist() == [0, 1, 2, 3] and test_y.tolist() == [0, 1, 2]
    assert train_x[0, 0, 1, 2] == 77 and train_x.sum() == 77


def write_norb(path, array: np.ndarray, magic: int) -> None:
    dims = list(array.shape) + [1] * (3 - array.ndim)  # at least three dimensions are stored
    payload = struct.pack(f"<{2 + len(dims)}i", magic, array.ndim, *dims) + array.tobytes()
    if path.suffix == ".gz":
        payload = gzip.compress(payload)
    path.write_bytes(payload)


def write_smallnorb(root, n: int = 3):
    folder = root / "smallNORB"
    folder.mkdir(parents=True)
    images = np.zeros((n, 2, 96, 96), dtype=np.uint8)
    images[:, 0, :2, :2] = 100  # one 2x2 block of the left image -> one pixel at 48x48
    images[:, 1] = 255  # the right image must be ignored
    for split, prefix in PREFIXES.items():
        write_norb(folder / f"{prefix}-dat.mat", images, 0x1E3D4C55)
        write_norb(folder / f"{prefix}-cat.mat.gz", np.arange(n, dtype="<i4") % 5, 0x1E3D4C54)
    return folder


def test_smallnorb_binary_matrix_reader_and_preprocessing(tmp_path):
    folder = write_smallnorb(tmp_path)
    labels = read_binary_matrix(folder / f"{PREFIXES['test']}-cat.mat.gz")
    assert labels.tolist() == [0, 1, 2] and labels.dtype == np.int32
    train_x, train_y, test_x, test_y = DATASETS.get("smallnorb").load(tmp_path, False)
    assert train_x.shape == (3, 1, 48, 48) and train_x.dtype == torch.uint8 and test_y.tolist() == [0, 1, 2]
    assert train_x[0, 0, 0, 0] == 100 and train_x[0].sum() == 100  # left image, area-downsampled


def test_smallnorb_rejects_a_wrong_magic_and_missing_files(tmp_path):
    bad = tmp_path / "bad.mat"
    bad.write_bytes(struct.pack("<5i", 0x12345678, 1, 1, 1, 1))
    with pytest.raises(CapsbenchError, match="not a NORB binary matrix"):
        read_binary_matrix(bad)
    with pytest.raises(CapsbenchError, match="smallnorb-5x46789x9x18x6x2x96x96-training-dat.mat"):
        DATASETS.get("smallnorb").load(tmp_path, False)


@pytest.mark.parametrize("name", ["fashion_mnist", "cifar10", "svhn"])
def test_missing_files_offline_name_the_directory(tmp_path, name):
    with pytest.raises(CapsbenchError, match="CAPSBENCH_DATA"):
        DATASETS.get(name).load(tmp_path, False)


def test_smallnorb_splits_use_the_crop_protocol(tmp_path):
    write_smallnorb(tmp_path, n=6)
    splits = load_splits("smallnorb", root=tmp_path, download=False, val_size=2)
    assert splits.train_x.shape == (4, 1, 48, 48) and splits.spec.num_classes == 5
    assert isinstance(dataset_protocol("smallnorb", 2), RandomCropProtocol)
    assert type(dataset_protocol("mnist", 2)) is TrainingProtocol


def test_crop_protocol_centre_and_random_crops():
    protocol = RandomCropProtocol(size=32)
    images = torch.arange(48 * 48, dtype=torch.float32).view(1, 1, 48, 48).repeat(64, 2, 1, 1)
    assert protocol.input_size(48) == 32
    centre = protocol.eval_inputs(images)
    assert torch.equal(centre, images[:, :, 8:40, 8:40])
    crops = protocol.train_batch(images, torch.zeros(64, dtype=torch.long), torch.Generator().manual_seed(0)).inputs
    top, left = crops[:, 0, 0, 0].long() // 48, crops[:, 0, 0, 0].long() % 48
    assert crops.shape == (64, 2, 32, 32) and top.max() <= 16 and left.max() <= 16 and len(set(top.tolist())) > 5
    for i in range(3):
        assert torch.equal(crops[i], images[i, :, top[i] : top[i] + 32, left[i] : left[i] + 32])
