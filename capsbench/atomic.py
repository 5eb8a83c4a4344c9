"""Atomic file writes: write a temporary file beside the target, fsync, rename. Readers never see half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_file(path: Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file for writing; on clean exit it replaces `path`, on any exception it vanishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # KeyboardInterrupt too: never leave a partial file behind
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    with atomic_file(path, "w") as fh:
        fh.write(text)
