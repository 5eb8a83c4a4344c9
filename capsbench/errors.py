"""User-facing errors: what was wrong, what was expected, how to fix it, and the exit status each ends with.

Exit statuses of `capsbench` (docs/outputs.md): 0 every planned unit finished; 1 a check-model check failed (from any
other command: an unforeseen error, a bug); 2 bad input or environment, refused before anything was written; 3 the run
started and a unit failed (or a fault stopped it, or standard output could not be written); 130 / 143 SIGINT /
SIGTERM, every open MLflow run ended KILLED; 141 standard output closed by its reader.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 3
SHOWN_CHARS = 80  # of a value a message quotes


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """A value as a one-line message quotes it: whole, or its start and how long it is (a list of 10,000 seeds is not
    echoed back)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


class CapsbenchError(Exception):
    """An error caused by user input or environment, found before any work: one line, exit 2, nothing written."""

    exit_status = EXIT_BAD_INPUT


class RunFailed(CapsbenchError):
    """A run that started and did not finish every unit (a unit failed, or a fault stopped it): exit 3."""

    exit_status = EXIT_RUN_FAILED


class NoSpace(CapsbenchError):
    """A write that found its filesystem full (ENOSPC, or SQLite's "database or disk is full")."""

    def __init__(self, path: str | Path, needed: int | None = None) -> None:
        self.path = Path(path)
        super().__init__(no_space_message(self.path, needed))


def _size(n: int) -> str:
    """Bytes in the largest unit that keeps a number >= 1: 512 B, 3.4 kB, 12.0 MB, 1.5 GB."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def no_space_message(path: Path, needed: int | None) -> str:
    """'no space left on device writing PATH (needs at least N MB, M MB free there); ...' for a full filesystem, or
    what the file-size limit is where this process has one (`ulimit -f`)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = f"{_size(shutil.disk_usage(probe).free)} free there"
    except OSError:
        free = "free space unknown"
    need = f"needs at least {_size(needed)}, " if needed else ""
    then = "then run the same command again (finished units and checkpoints are kept)"
    if (limit := file_size_limit()) is not None:
        return (f"no room to write {path}: this process may write files of at most {_size(limit)} (ulimit -f) "
                f"({need}{free}); raise the limit (ulimit -f unlimited), {then}")
    return (f"no space left on device writing {path} ({need}{free}); free some space or point output_dir= / "
            f"cache_dir= at a larger disk, {then}")


def file_size_limit() -> int | None:
    """The largest file this process may write, in bytes (the soft RLIMIT_FSIZE, `ulimit -f`), None without one."""
    import resource  # POSIX only, as the limit is

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def is_no_space(exc: BaseException) -> bool:
    """Whether `exc` or an exception it was raised from is a write that found no room: a full disk (OSError
    ENOSPC/EDQUOT, or SQLite's SQLITE_FULL, which SQLAlchemy and MLflow wrap) or the file-size limit (OSError EFBIG,
    or SQLite's I/O error while this process has such a limit: SQLite reports the limit no other way)."""
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return True
        code = getattr(current, "sqlite_errorcode", None)
        if code == SQLITE_FULL or (code is not None and code & 0xFF == SQLITE_IOERR and file_size_limit() is not None):
            return True
    return False


def store_moved(exc: BaseException) -> bool:
    """Whether `exc` or an exception it was raised from is SQLite finding its database file deleted or moved while
    open (SQLITE_READONLY_DBMOVED: "attempt to write a readonly database")."""
    return any(getattr(current, "sqlite_errorcode", None) == SQLITE_READONLY_DBMOVED for current in _chain(exc))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from (causes, contexts, and the driver errors SQLAlchemy wraps)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__ or getattr(current, "orig", None)


SQLITE_FULL = 13  # sqlite3.SQLITE_FULL: "database or disk is full"
SQLITE_READONLY_DBMOVED = 1032  # SQLITE_READONLY (8) | 4 << 8: the database file was unlinked or renamed
SQLITE_IOERR = 10  # sqlite3.SQLITE_IOERR: "disk I/O error" (an extended code keeps it in its low byte)
