"""The files each dataset (and the real affNIST test set) is read from, where they are downloaded from and where to get
them by hand, which of them are absent or damaged under a data root, and the download of missing ones. Torch-free, so
that the checks before work and a claims plan can judge the data before anything loads; the loaders keep their own
lists (they are part of the checkpoints' code hash) and a test checks that both agree."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from platformdirs import user_cache_dir

from capsbench.data.idx import idx_problem
from capsbench.errors import CapsbenchError
from capsbench.util.registry import close_matches

_IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_NORB = tuple(
    f"smallnorb-{prefix}-{part}.mat"
    for prefix in ("5x46789x9x18x6x2x96x96-training", "5x01235x9x18x6x2x96x96-testing")
    for part in ("dat", "cat")
)


def default_data_root() -> Path:
    """Where datasets go when neither data.root nor CAPSBENCH_DATA is given: the one data folder capsbench creates."""
    return Path(user_cache_dir("capsbench")) / "datasets"


@dataclass(frozen=True)
class Content:
    """What one official file holds, checked before work: unsigned bytes of `shape` in the IDX format (header and size,
    a gzipped file's too), and the MD5 torchvision publishes for it (`md5`; `gz_md5`: for the file gzipped)."""

    shape: tuple[int, ...] | None = None
    md5: str | None = None
    gz_md5: str | None = None

    def problem(self, path: Path) -> str | None:
        """What is wrong with the file at `path` (None: nothing found)."""
        found = idx_problem(path, self.shape) if self.shape is not None else None
        digest = self.gz_md5 if path.suffix == ".gz" else self.md5
        if found is None and digest is not None and (actual := _md5(path)) != digest:
            found = f"its MD5 is {actual}, the official file's is {digest}: it is damaged or another file"
        return found


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class DataFiles:
    """What one data source needs under data.root: `folder`, then each of `files` (or the files of one of the
    `alternatives`, e.g. affNIST's single test.mat or its 32 batches); `gz`: name.gz stands for name; `torchvision`:
    the torchvision class that downloads them (with data.download=true), else None; `download_url`: the host it
    fetches from (None: never downloaded); `source`: where to get them by hand; `contents`: what each file holds, for
    the files that can be checked."""

    folder: str
    files: tuple[str, ...]
    source: str
    gz: bool = False
    torchvision: str | None = None
    download_url: str | None = None
    alternatives: tuple[tuple[str, ...], ...] = ()
    contents: dict[str, Content] = field(default_factory=dict)

    def missing(self, root: Path) -> list[Path]:
        """The absent files under `root`, none when one of the alternatives is complete (the first one's otherwise)."""
        base = Path(root) / self.folder
        options = [self.files, *self.alternatives]
        absent = [[base / f for f in option if not self._present(base / f)] for option in options]
        return [] if any(not a for a in absent) else absent[0]

    def _present(self, path: Path) -> bool:
        return self.read_path(path) is not None

    def read_path(self, path: Path) -> Path | None:
        """The file a loader reads for `path`: the file itself, else (gz) its gzipped twin, else None."""
        for candidate in (path, path.with_name(path.name + ".gz") if self.gz else None):
            if candidate is not None and candidate.is_file():
                return candidate
        return None

    def damaged(self, root: Path) -> list[tuple[Path, str]]:
        """The present files under `root` that do not hold what the official files hold, each with what is wrong."""
        found = []
        for name, content in self.contents.items():
            path = self.read_path(Path(root) / self.folder / name)
            if path is not None and (problem := content.problem(path)) is not None:
                found.append((path, problem))
        return found

    def how_to_get(self, root: Path) -> str:
        """Where the files come from, with the command that fetches them where torchvision can."""
        text = f"from {self.source}"
        if self.torchvision:
            text += (
                f", or with internet: uv run python -c \"from torchvision.datasets import {self.torchvision}; "
                f"{self.torchvision}('{root}', download=True)\""
            )
        return text


def _idx(gz_md5: tuple[str, ...], md5: tuple[str, ...]) -> dict[str, Content]:
    """The four IDX files of an MNIST-like dataset (60,000 training and 10,000 test images of 28 x 28), with
    torchvision's MD5s of their gzipped forms (torchvision.datasets.MNIST.resources and FashionMNIST's) and the MD5s of
    those files decompressed (what torchvision's download leaves beside them), so that an edited byte of an
    uncompressed file (a label of 200) is found before work too."""
    shapes = ((60_000, 28, 28), (60_000,), (10_000, 28, 28), (10_000,))
    return {name: Content(shape=shape, gz_md5=gz, md5=raw) for name, shape, gz, raw in zip(_IDX, shapes, gz_md5, md5)}


_CIFAR_MD5 = ("c99cafc152244af753f735de768cd75f", "d4bba439e000b95fd0a9bffe97cbabec",
              "54ebc095f3ab1f0389bbae665268c751", "634d18415352ddfa80567beed471001a",
              "482c414d41f54cd18b22e5b47cb7c3cb", "40351d587109b95175f43aff81a1287e")
_CIFAR = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
_SVHN = {"train_32x32.mat": "e26dedcc434d2e4c54c9b2d4a06d8373", "test_32x32.mat": "eb5a983be6a315427106f1b164d9cef3"}

DATA_FILES: dict[str, DataFiles] = {
    "mnist": DataFiles(
        "MNIST/raw", _IDX, "http://yann.lecun.com/exdb/mnist/", gz=True, torchvision="MNIST",
        download_url="https://ossci-datasets.s3.amazonaws.com/mnist/",
        contents=_idx(("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
                       "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"),
                      ("6bbc9ace898e44ae57da46a324031adb", "a25bea736e30d166cdddb491f175f624",
                       "2646ac647ad5339dbf082846283269ea", "27ae3e4e09519cfbb04c329615203637")),
    ),
    "fashion_mnist": DataFiles(
        "FashionMNIST/raw", _IDX, "https://github.com/zalandoresearch/fashion-mnist (Debian: dataset-fashion-mnist)",
        gz=True, torchvision="FashionMNIST", download_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        contents=_idx(("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
                       "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"),
                      ("f4a8712d7a061bf5bd6d2ca38dc4d50a", "9018921c3c673c538a1fc5bad174d6f9",
                       "8181f5470baa50b63fa0f6fddb340f0a", "15d484375f8d13e6eb1aabb0c3f46965")),
    ),
    "cifar10": DataFiles(
        "cifar-10-batches-py", _CIFAR, "https://www.cs.toronto.edu/~kriz/cifar.html (the python version)",
        torchvision="CIFAR10", download_url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        contents={name: Content(md5=md5) for name, md5 in zip(_CIFAR, _CIFAR_MD5)},  # torchvision's CIFAR10 lists
    ),
    "svhn": DataFiles("SVHN", tuple(_SVHN), "http://ufldl.stanford.edu/housenumbers/",
                      download_url="http://ufldl.stanford.edu/housenumbers/",
                      contents={name: Content(md5=md5) for name, md5 in _SVHN.items()}),  # torchvision's SVHN list
    "smallnorb": DataFiles("smallNORB", _NORB, "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/", gz=True),
    "affnist": DataFiles(
        "affNIST", ("test.mat",),
        "https://www.cs.toronto.edu/~tijmen/affNIST/ (test.mat, or the 32 files of test_batches/)",
        alternatives=(tuple(f"test_batches/{i}.mat" for i in range(1, 33)),),
    ),
}


def missing_files(name: str, root: Path) -> list[Path]:
    """The files of dataset (or data source) `name` that are absent under `root`."""
    if name not in DATA_FILES:
        raise CapsbenchError(f"no declared files for data {name!r}: {close_matches(name, list(DATA_FILES))}")
    return DATA_FILES[name].missing(root)


def check_damaged(name: str, root: Path) -> None:
    """The first present file of dataset `name` under `root` that does not hold what the official file holds, named
    with what is wrong and what to do, as one CapsbenchError."""
    spec = DATA_FILES[name]
    for path, problem in spec.damaged(root)[:1]:
        again = ", or delete it and run with data.download=true to fetch it again" if spec.download_url else ""
        raise CapsbenchError(f"{name} file {path} is damaged: {problem}; replace it with the official file (from "
                             f"{spec.source}){again}")


def missing_text(name: str, missing: list[Path]) -> str:
    """'N file(s) of NAME missing (the first two, ...)'."""
    shown = ", ".join(str(p) for p in missing[:2]) + (", ..." if len(missing) > 2 else "")
    return f"{len(missing)} file(s) of {name} missing ({shown})"


def by_hand(name: str) -> str:
    """How to put a dataset's files in place without a download."""
    return (f"put them there (from {DATA_FILES[name].source}), or point data.root= (or CAPSBENCH_DATA) at a directory "
            "that has them")


def fetch_missing(name: str, root: Path, *, download: bool, fetch: Callable[[], object]) -> None:
    """Before a loader reads dataset `name` under `root`: its missing files fetched with `fetch` (torchvision's
    download) when data.download allows. A data.root that does not exist is never created, unless it is the default
    download directory, and a download that fails leaves no folder it created; each refusal is one CapsbenchError."""
    spec, root = DATA_FILES[name], Path(root)
    missing = spec.missing(root)
    if not missing:
        return
    if spec.download_url is None or not download:
        why = "capsbench cannot download them" if spec.download_url is None else "data.download=false"
        raise CapsbenchError(f"{missing_text(name, missing)} and {why}: {by_hand(name)}"
                             + (", or allow data.download=true" if spec.download_url else ""))
    if not root.is_dir() and root.resolve() != default_data_root().resolve():
        raise CapsbenchError(f"data.root {root} does not exist and capsbench never creates a data folder you named: "
                             f"put {name} back there, or point data.root= (or CAPSBENCH_DATA) at a directory that "
                             "has it, then run the same command again")
    created = _created_by(root / spec.folder)
    try:
        fetch()
    except (OSError, RuntimeError) as exc:  # torchvision's download: URLError, or RuntimeError after every mirror
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        reason = ([line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__])[-1]
        host = urlsplit(spec.download_url).hostname
        raise CapsbenchError(f"{missing_text(name, missing)} and their download from {host} failed ({reason}): "
                             f"{by_hand(name)}, or run where it can be reached") from None


def _created_by(folder: Path) -> Path | None:
    """The outermost folder of `folder` and its parents that does not exist yet (a download would create it)."""
    outermost = None
    while not folder.exists() and folder != folder.parent:
        outermost, folder = folder, folder.parent
    return outermost
