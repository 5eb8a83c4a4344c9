"""Progress for every stage that can take more than a few seconds: a bar on a terminal, a plain log line every
LOG_EVERY seconds otherwise, nothing with --quiet."""

from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

LOG_EVERY = 30.0  # seconds between plain progress lines when stderr is not a terminal
log = logging.getLogger("capsbench.util.progress")
_quiet = False


def set_quiet(quiet: bool) -> None:
    """Turn progress bars and progress lines off (or on) for this process."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    """Whether progress output is off."""
    return _quiet


class Progress:
    """A counter over `total` steps: a tqdm bar on a TTY, periodic log lines elsewhere. `note` sets a short status."""

    def __init__(self, desc: str, total: int | None, *, unit: str = "it", leave: bool = False) -> None:
        self.desc, self.total, self.done, self.status = desc, total, 0, ""
        self._start = self._last = time.monotonic()
        tty = sys.stderr.isatty()
        self._bar = None if _quiet or not tty else tqdm(total=total, desc=desc, unit=unit, leave=leave)
        self._lines = not _quiet and not tty

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._lines and time.monotonic() - self._last >= LOG_EVERY:
            self._last = time.monotonic()
            log.info("%s: %s", self.desc, self._count())  # the status was logged when it was set

    def note(self, status: str) -> None:
        """Set the status: shown beside the bar on a terminal, logged at once (with the count) elsewhere."""
        self.status = status
        if self._bar is not None:
            self._bar.set_postfix_str(status)
        elif self._lines:
            self._last = time.monotonic()
            log.info("%s: %s (%s)", self.desc, self._count(), status)

    def _count(self) -> str:
        if not self.total:
            return f"{self.done} done"
        elapsed = time.monotonic() - self._start
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        return f"{self.done}/{self.total} done, about {eta / 60:.1f} min left" if self.done else f"0/{self.total} done"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
