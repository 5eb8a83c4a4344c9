"""The IDX files of MNIST and Fashion-MNIST (LeCun et al.), raw or gzipped: a big-endian magic number 0x000008NN
(unsigned bytes, NN dimensions), the NN dimensions as big-endian int32, then the bytes in C order. Torch-free: the
checks before work read a file's header and size; the loaders read it whole through the same checks."""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

from capsbench.errors import CapsbenchError

UNSIGNED_BYTE = 0x08
Shape = tuple[int | None, ...]  # None: any number along that axis (a loader reads files of any length)


def magic(ndim: int) -> int:
    """The magic number of an IDX file of unsigned bytes with `ndim` dimensions (0x00000803 for images)."""
    return UNSIGNED_BYTE << 8 | ndim


def header_size(ndim: int) -> int:
    """The bytes of an IDX header: the magic number and one int32 per dimension."""
    return 4 + 4 * ndim


def _shape(dims: Shape) -> str:
    return " x ".join("N" if d is None else f"{d:,}" for d in dims)


def read_header(head: bytes, shape: Shape) -> tuple[tuple[int, ...], str | None]:
    """(the dimensions, what is wrong) from the first header_size bytes of a file that should be an IDX file of
    unsigned bytes of `shape`; what is wrong is None when the header fits."""
    want, n = magic(len(shape)), header_size(len(shape))
    if len(head) >= 4 and (found := struct.unpack(">I", head[:4])[0]) != want:
        return (), (f"its magic number is {found:#010x}, expected {want:#010x} (IDX, unsigned bytes, {len(shape)} "
                    "dimension(s)): it is no IDX file of this kind")
    if len(head) < n:
        return (), f"it ends inside its {n}-byte header"
    dims = struct.unpack(f">{len(shape)}I", head[4:n])
    if any(w is not None and d != w for d, w in zip(dims, shape)):
        return dims, f"its header says {_shape(dims)}, expected {_shape(shape)}: it is another file of this name"
    return dims, None


def size_problem(size: int, dims: tuple[int, ...]) -> str | None:
    """What a file of `size` bytes lacks, or holds beyond, an IDX header and the elements of `dims`."""
    want = header_size(len(dims)) + math.prod(dims)
    if size == want:
        return None
    return (f"it holds {size:,} bytes, expected {want:,} (the {header_size(len(dims))}-byte header and {_shape(dims)} "
            f"bytes of data): {'it was cut short' if size < want else 'it has bytes beyond its data'}")


def idx_problem(path: Path, shape: Shape) -> str | None:
    """What is wrong with the IDX file at `path` (raw, or gzipped when its name ends .gz) that should hold unsigned
    bytes of `shape`, from its header and size alone (a gzipped file's size from its trailer); None when nothing."""
    gz = path.suffix == ".gz"
    try:
        with (gzip.open if gz else open)(path, "rb") as fh:
            dims, problem = read_header(fh.read(header_size(len(shape))), shape)
        if problem is not None or not gz:
            return problem or size_problem(path.stat().st_size, dims)
        with open(path, "rb") as fh:
            fh.seek(-4, 2)
            size = struct.unpack("<I", fh.read(4))[0]  # gzip's ISIZE: the uncompressed size modulo 2**32
        want = header_size(len(dims)) + math.prod(dims)
        if size != want % 2**32:
            return f"its gzip stream was cut short or damaged (its trailer says {size:,} bytes, expected {want:,})"
        return None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        return f"its gzip stream was cut short or damaged ({exc})"
    except OSError as exc:
        return f"it cannot be read ({exc})"


def read_idx(path: Path, shape: Shape) -> bytes:
    """The elements of the IDX file at `path` (gzipped when its name ends .gz), checked against `shape`."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise CapsbenchError(f"{path} cannot be read ({exc}); replace it with the official file") from None
    dims, problem = read_header(data[:header_size(len(shape))], shape)
    problem = problem or size_problem(len(data), dims)
    if problem:
        raise CapsbenchError(f"{path} is damaged: {problem}; replace it with the official file")
    return data[header_size(len(shape)):]
