"""Progress for every stage that can take more than a few seconds: a tqdm bar on a terminal (or wherever bars are
asked for: capsbench.evaluate in a notebook), whose clock a ticker thread refreshes every second even while one step
runs for minutes; off a terminal, a plain log line when a stage changes what it does and at least every LOG_EVERY
seconds while work goes on; nothing with --quiet. Log lines go through tqdm's logging redirect (`redirect_logging`),
so they never land on a bar's line. A unit's measuring reports the work it has done (`measured`) to whoever listens
(`on_measured`): the driver credits it to the units' bar as it happens. A stage whose work was priced before it ran
(the units) takes its time left from its Pace (capsbench.util.pace): the price blended with the rate seen."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from capsbench.util.pace import Pace

LOG_EVERY = 30.0  # at most this many seconds between plain progress lines when stderr is not a terminal
REFRESH_EVERY = 1.0  # seconds between redraws of the bars on a terminal (their elapsed clocks keep moving)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]"  # tqdm's postfix: ", <status>"
OPEN_FORMAT = "{desc}: [{elapsed}{postfix}]"  # before the total is known
log = logging.getLogger("capsbench.util.progress")
_quiet = False
_bars = False  # bars where stderr is not a terminal but a notebook shows them (capsbench.evaluate)
_open: list[Progress] = []  # open stages, outermost first
_listener: Callable[[float], None] | None = None  # where `measured` goes
_lock = threading.Lock()
_ticker: threading.Thread | None = None


def set_quiet(quiet: bool) -> None:
    """Turn progress bars and progress lines off (or on) for this process."""
    global _quiet
    _quiet = quiet


@contextlib.contextmanager
def shown(on: bool) -> Iterator[None]:
    """While the block runs: progress when `on` (bars in a notebook, tqdm's widget; plain lines on stderr elsewhere,
    even where no logging is set up), else nothing at all."""
    global _quiet, _bars
    before = _quiet, _bars
    _quiet, _bars = not on, on
    plain = on and "ipykernel" not in sys.modules and not sys.stderr.isatty()
    handler = logging.StreamHandler(sys.stderr) if plain else None
    level, propagate = log.level, log.propagate
    if handler is not None:  # the lines go to stderr once, whatever logging the caller set up
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    try:
        yield
    finally:
        _quiet, _bars = before
        if handler is not None:
            log.removeHandler(handler)
            log.setLevel(level)
            log.propagate = propagate


@contextlib.contextmanager
def on_measured(listener: Callable[[float], None]) -> Iterator[None]:
    """While the block runs, each `measured(passes)` goes to `listener` (a unit's events back to the driver)."""
    global _listener
    before, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = before


def measured(passes: float) -> None:
    """The image passes of its declared work (Suite.work) a unit's measuring has done so far; nothing when nobody
    listens."""
    if _listener is not None:
        _listener(passes)


@contextlib.contextmanager
def redirect_logging() -> Iterator[None]:
    """Log lines to the console go through tqdm.write while the block runs: above the bars, never on their line."""
    with logging_redirect_tqdm():
        yield


class Progress:
    """Work done of `total` (any unit: units weighted by their declared cost, batches, attack row-steps): a tqdm bar
    on a terminal, log lines elsewhere. `note` sets what the stage is doing (logged once, at once, off a terminal);
    `show` sets a live detail (e.g. rows left) shown on the bar and in the periodic lines. The time left is the
    work left at the rate measured so far, so work of unequal cost is weighted by it, not counted; with a `pace`, at
    the price blended with that rate, from the first line on."""

    def __init__(self, desc: str, total: float | None, *, unit: str = "it", leave: bool = False,
                 count: str = "", pace: Pace | None = None) -> None:
        self.desc, self.total, self.done, self.status, self.detail = desc, total, 0.0, "", ""
        self.count = count  # what `done` counts, for lines off a terminal (e.g. "row-steps"); empty: percent only
        self.pace = pace
        self._start = self._last = time.monotonic()
        tty = sys.stderr.isatty() or (_bars and "ipykernel" in sys.modules)  # no cursor codes into a log file
        self._bar = None
        if not _quiet and tty:  # smoothing 0: the time left is the work left at the average rate, as in line()
            self._bar = _Bar(total=total, desc=desc, unit=unit, leave=leave, dynamic_ncols=True, smoothing=0,
                             bar_format=BAR_FORMAT if total else OPEN_FORMAT)
            self._bar.stage = self
        self._lines = not _quiet and not tty
        with _lock:
            _open.append(self)
        _start_ticker()

    @property
    def shown(self) -> bool:
        """Whether anything is shown (a bar or lines): details that cost something to compute are skipped if not."""
        return self._bar is not None or self._lines

    def update(self, n: float = 1, *, status: str | None = None) -> None:
        """Add `n` to the work done; with `status`, also set what the stage does now (one line, not two)."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        if status is not None:
            self.note(status)

    def reset(self, total: float | None) -> None:
        """Start the next piece of work of this stage (the status stays): a new total (None: not known yet), nothing
        done, the clock from zero."""
        self.total, self.done, self.detail = total, 0.0, ""
        self._start = time.monotonic()
        if self._bar is not None:
            self._bar.bar_format = BAR_FORMAT if total else OPEN_FORMAT
            self._bar.reset(total=total)

    def add_total(self, delta: float) -> None:
        """Change the total by `delta` (work that turned out not to be needed), keeping the work done and the clock."""
        self.total = (self.total or 0.0) + delta
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def note(self, status: str) -> None:
        """Set the status: shown beside the bar on a terminal, logged once (with the work done) elsewhere."""
        self.status = status
        self._postfix()
        if self._lines:
            self._last = time.monotonic()
            log.info("%s", self.line())

    def show(self, detail: str) -> None:
        """A detail that changes often (rows left): on the bar at once, in the next periodic line elsewhere."""
        self.detail = detail
        self._postfix()

    def line(self) -> str:
        """The stage in one line: what it does, work done, elapsed time and the time left at the measured rate."""
        elapsed = time.monotonic() - self._start
        parts = [p for p in (self.status, self.detail) if p]
        if self.total:
            count = f" ({self.done:,.0f}/{self.total:,.0f} {self.count})" if self.count else ""
            parts.append(f"{100 * self.done / self.total:.0f} % done{count}")
        elif self.count:
            parts.append(f"{self.done:,.0f} {self.count} done")
        parts.append(f"{_minutes(elapsed)} elapsed")
        if (left := self.left()) is not None:
            parts.append(f"about {_minutes(left)} left")
        return f"{self.desc}: " + ", ".join(parts)

    def left(self) -> float | None:
        """Seconds left: by the pace where there is one, else the work left at the rate seen (None before any work
        is done, or with no total)."""
        if not self.total or self.done >= self.total:
            return None
        elapsed = time.monotonic() - self._start
        if self.pace is not None:
            return self.pace.left(self.done, self.total, elapsed)
        return elapsed / self.done * (self.total - self.done) if self.done > 0 else None

    def _postfix(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(", ".join(p for p in (self.status, self.detail) if p))

    def close(self) -> None:
        with _lock:
            if self in _open:
                _open.remove(self)
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Bar(tqdm):
    """A tqdm bar whose time left is its stage's (Progress.left), not only the rate it saw."""

    stage: Progress | None = None

    @property
    def format_dict(self) -> dict:
        out = super().format_dict
        left = self.stage.left() if self.stage is not None else None
        if left is not None and left > 0:  # tqdm prints (total - n) / rate as the time left
            out["rate"] = (out["total"] - out["n"]) / left
        return out


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def tick(now: float | None = None) -> None:
    """Redraw the bars (their clocks move), and off a terminal log one line of every open stage when none has
    printed a line for LOG_EVERY seconds. The ticker thread calls it every REFRESH_EVERY seconds."""
    now = time.monotonic() if now is None else now
    with _lock:
        stages = list(_open)
    for stage in stages:
        if stage._bar is not None:
            stage._bar.refresh()
    lines = [s for s in stages if s._lines]
    if lines and now - max(s._last for s in lines) >= LOG_EVERY:
        for stage in lines:
            stage._last = now
        log.info("%s", " | ".join(s.line() for s in lines))


def _start_ticker() -> None:
    global _ticker
    with _lock:
        if _ticker is not None or _quiet:
            return
        _ticker = threading.Thread(target=_tick_forever, name="capsbench-progress", daemon=True)
        _ticker.start()


def _tick_forever() -> None:
    while True:
        time.sleep(REFRESH_EVERY)
        tick()
