"""Damaged or vanishing data files: a file that does not hold what the official one holds (IDX magic number,
dimensions and size; torchvision's published checksums) is named with what was expected before any work (exit 2,
nothing written); a data folder that goes away during a run is one line (exit 3) and no data folder is created."""

import gzip
import hashlib
import math
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config import preflight
from capsbench.data import DATASETS, idx
from capsbench.data.files import DATA_FILES, fetch_missing
from capsbench.errors import CapsbenchError

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1", "models=[cnn_9x9]",
       "tracking.enabled=false", "-q"]
IMAGES, LABELS = "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"


def write_idx(path: Path, shape: tuple[int, ...], *, magic: int | None = None, size: int | None = None) -> None:
    """An IDX file of unsigned bytes with this header, zeros after it (sparse), `size` bytes long (default: whole)."""
    with path.open("wb") as fh:
        fh.write(struct.pack(f">{1 + len(shape)}I", magic or idx.magic(len(shape)), *shape))
        fh.truncate(idx.header_size(len(shape)) + math.prod(shape) if size is None else size)


def mnist_like(root: Path, real: Path, name: str = "mnist") -> Path:
    """Links under root to the four official files of `name` under `real`: its raw folder."""
    spec = DATA_FILES[name]
    raw = root / spec.folder
    raw.mkdir(parents=True)
    for file in spec.contents:
        (raw / file).symlink_to(real / spec.folder / file)
    return raw


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
@pytest.mark.parametrize("damage, said", [
    (lambda p: write_idx(p, (10_000,), size=5_004), "it holds 5,004 bytes, expected 10,008 (the 8-byte header and "
                                                    "10,000 bytes of data): it was cut short"),
    (lambda p: write_idx(p, (10_000,), magic=0x00000803),
     "its magic number is 0x00000803, expected 0x00000801 (IDX, unsigned bytes, 1 dimension(s)): it is no IDX file of "
     "this kind"),
    (lambda p: write_idx(p, (60_000,)), "its header says 60,000, expected 10,000: it is another file of this name"),
    (lambda p: p.write_bytes(b"\0\0"), "it ends inside its 8-byte header"),
], ids=["cut in half", "wrong magic", "other dimensions", "no header"])
def test_a_damaged_idx_file_is_named_with_what_was_expected(tmp_path, mnist_root, name, damage, said):
    raw = mnist_like(tmp_path, mnist_root, name)
    assert DATA_FILES[name].damaged(tmp_path) == []
    (raw / LABELS).unlink()
    damage(raw / LABELS)
    assert DATA_FILES[name].damaged(tmp_path) == [(raw / LABELS, said)]
    with pytest.raises(CapsbenchError) as err:
        preflight.check_data_files(name, str(tmp_path), download=False)
    assert str(err.value).startswith(f"{name} file {raw / LABELS} is damaged: {said}; replace it with the official "
                                     f"file (from {DATA_FILES[name].source}), or delete it and run with "
                                     "data.download=true to fetch it again")


def test_a_gzipped_file_is_checked_by_its_header_trailer_and_published_checksum(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    whole = gzip.compress(struct.pack(">2I", 0x801, 10_000) + np.random.default_rng(0).bytes(10_000))
    (raw / f"{LABELS}.gz").write_bytes(whole[: len(whole) // 2])
    assert idx.idx_problem(raw / f"{LABELS}.gz", (10_000,)).startswith(
        "its gzip stream was cut short or damaged (its trailer says ")
    (raw / f"{LABELS}.gz").write_bytes(whole[:20])
    assert idx.idx_problem(raw / f"{LABELS}.gz", (10_000,)) == ("its gzip stream was cut short or damaged (Compressed "
                                                                 "file ended before the end-of-stream marker was "
                                                                 "reached)")
    (raw / f"{LABELS}.gz").write_bytes(whole)  # whole, but not the published file
    ((path, problem),) = DATA_FILES["mnist"].damaged(tmp_path)
    assert path == raw / f"{LABELS}.gz" and problem == (
        f"its MD5 is {hashlib.md5(whole).hexdigest()}, the official file's is ec29112dd5afa0611ce80d1b7f02629c: it is "
        "damaged or another file")


def test_cifar10_and_svhn_files_are_checked_against_torchvisions_checksums(tmp_path):
    from torchvision.datasets import CIFAR10, SVHN

    declared = {file: c.md5 for name in ("cifar10", "svhn") for file, c in DATA_FILES[name].contents.items()}
    published = {n: md5 for n, md5 in CIFAR10.train_list + CIFAR10.test_list}
    published |= {name: md5 for split, (_, name, md5) in SVHN.split_list.items() if split != "extra"}
    assert declared == published
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(b"not a pickle")
    ((path, problem),) = DATA_FILES["cifar10"].damaged(tmp_path)
    assert path == folder / "test_batch" and "the official file's is 40351d587109b95175f43aff81a1287e" in problem


def test_the_declared_gz_checksums_are_torchvisions():
    from torchvision.datasets import MNIST, FashionMNIST

    for name, cls in (("mnist", MNIST), ("fashion_mnist", FashionMNIST)):
        declared = {f"{file}.gz": c.gz_md5 for file, c in DATA_FILES[name].contents.items()}
        assert declared == dict(cls.resources)


def write_small(raw: Path, n: dict[str, int], gz: bool) -> None:
    """Tiny MNIST-format files (n images per split) with their real headers; gzipped when `gz`."""
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, count in n.items():
        for kind, shape in (("images-idx3", (count, 28, 28)), ("labels-idx1", (count,))):
            data = struct.pack(f">{1 + len(shape)}I", idx.magic(len(shape)), *shape)
            data += rng.integers(0, 10, shape, dtype=np.uint8).tobytes()
            name = f"{split}-{kind}-ubyte"
            (raw / (name + ".gz" if gz else name)).write_bytes(gzip.compress(data) if gz else data)


def test_gzipped_mnist_alone_is_read_offline_and_a_cut_file_is_named_by_the_loader(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_small(raw, {"train": 12, "t10k": 5}, gz=True)
    train_x, train_y, test_x, test_y = DATASETS.get("mnist").load(tmp_path, False)
    assert train_x.shape == (12, 1, 28, 28) and test_y.shape == (5,) and str(train_y.dtype) == "torch.int64"
    cut = raw / "t10k-images-idx3-ubyte"  # a raw file beside its .gz is the one read
    cut.write_bytes(gzip.decompress((raw / "t10k-images-idx3-ubyte.gz").read_bytes())[:1000])
    with pytest.raises(CapsbenchError, match=f"^{cut} is damaged: it holds 1,000 bytes, expected 3,936 .*cut short"):
        DATASETS.get("mnist").load(tmp_path, False)


@pytest.fixture
def offline_mirrors(monkeypatch):
    """torchvision's MNIST mirrors replaced by a host that never resolves: a download fails within seconds."""
    from torchvision.datasets import MNIST

    monkeypatch.setattr(MNIST, "mirrors", ["https://capsbench-test.invalid/mnist/"])


def test_a_failed_download_is_one_line_and_leaves_no_folder(tmp_path, offline_mirrors):
    root = tmp_path / "data"
    root.mkdir()
    with pytest.raises(CapsbenchError) as err:
        DATASETS.get("mnist").load(root, True)
    assert "\n" not in str(err.value) and str(err.value).startswith(
        f"4 file(s) of mnist missing ({root / 'MNIST' / 'raw' / IMAGES}, ")
    assert "and their download from ossci-datasets.s3.amazonaws.com failed (" in str(err.value)
    assert list(root.iterdir()) == []  # torchvision made MNIST/raw/ for its download: removed


def test_a_named_data_root_that_is_gone_is_never_created(tmp_path):
    fetched = []
    with pytest.raises(CapsbenchError, match="does not exist and capsbench never creates a data folder you named"):
        fetch_missing("mnist", tmp_path / "gone", download=True, fetch=lambda: fetched.append(1))
    assert fetched == [] and not (tmp_path / "gone").exists()


def linked_mnist(root: Path, mnist_root: Path) -> Path:
    """A data root whose MNIST/raw/ links to the real files: its raw folder."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for path in (mnist_root / "MNIST" / "raw").iterdir():
        (raw / path.name).symlink_to(path)
    return raw


@pytest.mark.parametrize("damage, said", [
    (lambda real, p: p.write_bytes(real.read_bytes()[:5_004]), "it holds 5,004 bytes, expected 10,008"),
    (lambda real, p: p.write_bytes(b"\0\0\x08\x03" + real.read_bytes()[4:]), "its magic number is 0x00000803"),
    (lambda real, p: p.write_bytes(real.read_bytes()[:8] + bytes([200]) + real.read_bytes()[9:]),
     "its MD5 is [0-9a-f]{32}, the official file's is 27ae3e4e09519cfbb04c329615203637: it is damaged or another file"),
], ids=["cut in half", "wrong magic", "a label of 200"])
def test_a_damaged_mnist_file_stops_the_run_before_work_naming_it(tmp_path, mnist_root, damage, said):
    raw = linked_mnist(tmp_path / "data", mnist_root)
    (raw / LABELS).unlink()
    damage(mnist_root / "MNIST" / "raw" / LABELS, raw / LABELS)
    before = sorted(p.name for p in raw.iterdir())
    result = CliRunner().invoke(app, [*RUN, f"data.root={tmp_path / 'data'}", f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [result.output.strip()]
    said = f"error: mnist file {re.escape(str(raw / LABELS))} is damaged: {said}"
    assert re.match(said, result.output), result.output
    assert not (tmp_path / "out").exists() and sorted(p.name for p in raw.iterdir()) == before


@pytest.mark.parametrize("gone", ["MNIST", "data"])
def test_a_data_folder_that_goes_away_during_the_run_is_one_line_and_nothing_is_created(
        tmp_path, mnist_root, monkeypatch, offline_mirrors, gone):
    """data.download=true (the default) and no answer from the mirrors: the loader's download fails, or data.root
    itself is gone; either way one line, exit 3, and the folder the user named holds no new folder."""
    root = tmp_path / "data"
    linked_mnist(root, mnist_root)
    checked = preflight.check_before_work

    def then_remove(cfg):
        checked(cfg)
        shutil.rmtree(root if gone == "data" else root / "MNIST")  # the links, not the real files

    monkeypatch.setattr(preflight, "check_before_work", then_remove)
    result = CliRunner().invoke(app, [*RUN, f"data.root={root}", f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 3, result.output
    errors = [line for line in result.output.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.output
    said = "does not exist and capsbench never creates" if gone == "data" else "and their download from"
    assert said in errors[0], errors[0]
    assert (list(root.iterdir()) == []) if gone == "MNIST" else not root.exists()
