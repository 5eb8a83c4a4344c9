"""Atomic file writes: write a temporary file beside the target, fsync, rename. Readers never see half a file, and a
full disk is one NoSpace error naming the target and the space it needed.

Files get the permissions of any new file under the user's umask (0644 under the usual 022), not mkstemp's 0600.
"""

from __future__ import annotations

import io
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from capsbench.errors import CapsbenchError, NoSpace, is_no_space


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, exclusively created file beside `path`; mode 0666 filtered by the umask, as open() would create it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


@contextmanager
def atomic_file(path: Path, mode: str = "w", size: int | None = None) -> Iterator[IO]:
    """Open a temporary file for writing; on clean exit it replaces `path`, on any exception it vanishes. A full disk
    raises NoSpace naming `path` and `size` (the bytes to be written, when the caller knows them)."""
    path = Path(path)
    try:
        make_folder(path.parent)
        fd, tmp = _create_temporary(path)
        try:
            with os.fdopen(fd, mode) as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:  # KeyboardInterrupt too: never leave a partial file behind
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        if is_no_space(exc):
            raise NoSpace(path, size) from exc
        raise


def make_folder(folder: Path) -> None:
    """`folder` and its parents, created where missing; a file where one of them belongs is a CapsbenchError naming
    it (mkdir's FileExistsError or NotADirectoryError name only the folder)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next(p for p in (folder, *folder.parents) if p.exists() and not p.is_dir())
        raise CapsbenchError(f"cannot create the folder {folder}: {blocking} is a file where a folder belongs; move it "
                             "away, then run the same command again") from None


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    data = text.encode()
    with atomic_file(path, "wb", size=len(data)) as fh:
        fh.write(data)


def save_torch(obj: Any, path: Path) -> None:
    """torch.save that leaves either the complete file or none (serialised in memory first: its size is then known
    when the disk is full)."""
    import torch  # here, not at the top: the torch-free CLI start-up imports this module

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with atomic_file(path, "wb", size=buffer.getbuffer().nbytes) as fh:
        fh.write(buffer.getbuffer())
