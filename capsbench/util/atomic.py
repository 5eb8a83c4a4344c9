"""Atomic file writes: write a temporary file beside the target, fsync, rename. Readers never see half a file.

Files get the permissions of any new file under the user's umask (0644 under the usual 022), not mkstemp's 0600.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


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
def atomic_file(path: Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file for writing; on clean exit it replaces `path`, on any exception it vanishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_file(path, "w") as fh:
        fh.write(text)


def save_torch(obj: Any, path: Path) -> None:
    """torch.save that leaves either the complete file or none."""
    import torch  # here, not at the top: the torch-free CLI start-up imports this module

    with atomic_file(path, "wb") as fh:
        torch.save(obj, fh)
