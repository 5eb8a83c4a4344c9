"""The files each dataset (and the real affNIST test set) is read from, where they are downloaded from and where to get
them by hand, and which of them are absent under a data root. Torch-free, so that the checks before work and a claims
plan can list missing data before anything loads; the loaders keep their own lists (they are part of the checkpoints'
code hash) and a test checks that both agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capsbench.errors import CapsbenchError
from capsbench.util.registry import close_matches

_IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_NORB = tuple(
    f"smallnorb-{prefix}-{part}.mat"
    for prefix in ("5x46789x9x18x6x2x96x96-training", "5x01235x9x18x6x2x96x96-testing")
    for part in ("dat", "cat")
)


@dataclass(frozen=True)
class DataFiles:
    """What one data source needs under data.root: `folder`, then each of `files` (or the files of one of the
    `alternatives`, e.g. affNIST's single test.mat or its 32 batches); `gz`: name.gz stands for name; `torchvision`:
    the torchvision class that downloads them (with data.download=true), else None; `download_url`: the host it
    fetches from (None: never downloaded); `source`: where to get them by hand."""

    folder: str
    files: tuple[str, ...]
    source: str
    gz: bool = False
    torchvision: str | None = None
    download_url: str | None = None
    alternatives: tuple[tuple[str, ...], ...] = ()

    def missing(self, root: Path) -> list[Path]:
        """The absent files under `root`, none when one of the alternatives is complete (the first one's otherwise)."""
        base = Path(root) / self.folder
        options = [self.files, *self.alternatives]
        absent = [[base / f for f in option if not self._present(base / f)] for option in options]
        return [] if any(not a for a in absent) else absent[0]

    def _present(self, path: Path) -> bool:
        return path.is_file() or (self.gz and path.with_name(path.name + ".gz").is_file())

    def how_to_get(self, root: Path) -> str:
        """Where the files come from, with the command that fetches them where torchvision can."""
        text = f"from {self.source}"
        if self.torchvision:
            text += (
                f", or with internet: uv run python -c \"from torchvision.datasets import {self.torchvision}; "
                f"{self.torchvision}('{root}', download=True)\""
            )
        return text


DATA_FILES: dict[str, DataFiles] = {
    "mnist": DataFiles("MNIST/raw", _IDX, "http://yann.lecun.com/exdb/mnist/", gz=True, torchvision="MNIST",
                       download_url="https://ossci-datasets.s3.amazonaws.com/mnist/"),
    "fashion_mnist": DataFiles(
        "FashionMNIST/raw", _IDX, "https://github.com/zalandoresearch/fashion-mnist (Debian: dataset-fashion-mnist)",
        torchvision="FashionMNIST", download_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    ),
    "cifar10": DataFiles(
        "cifar-10-batches-py", (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"),
        "https://www.cs.toronto.edu/~kriz/cifar.html (the python version)", torchvision="CIFAR10",
        download_url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    ),
    "svhn": DataFiles("SVHN", ("train_32x32.mat", "test_32x32.mat"), "http://ufldl.stanford.edu/housenumbers/",
                      download_url="http://ufldl.stanford.edu/housenumbers/"),
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
