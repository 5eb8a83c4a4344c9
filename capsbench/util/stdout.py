"""Standard output that says when it cannot be written: a reader that went away (`capsbench run ... | head -1`), a
full disk (`> /dev/full`). Each failed write raises OutputLost, which the console script reports in one line; what the
command made (files, MLflow runs) is written by then, only what it printed is cut short."""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, TextIO

from capsbench.errors import EXIT_RUN_FAILED

EXIT_PIPE_CLOSED = 128 + 13  # what a process killed by SIGPIPE returns; Python ignores SIGPIPE, so it is said here


class OutputLost(Exception):
    """Standard output could not be written; `status` is the exit status that says so."""

    def __init__(self, cause: OSError) -> None:
        self.closed = cause.errno == errno.EPIPE
        self.status = EXIT_PIPE_CLOSED if self.closed else EXIT_RUN_FAILED
        why = "its reader closed it (broken pipe)" if self.closed else (cause.strerror or type(cause).__name__)
        super().__init__(f"standard output cannot be written: {why}")


class _Guarded:
    """A text stream whose writes and flushes raise OutputLost instead of OSError."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputLost(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputLost(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_stdout() -> None:
    """Make sys.stdout raise OutputLost when it cannot be written (when it is closed, Python sets it to None)."""
    if sys.stdout is not None and not isinstance(sys.stdout, _Guarded):
        sys.stdout = _Guarded(sys.stdout)  # type: ignore[assignment]


def silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what could not be written fails
    no more (as Python's documentation advises for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
