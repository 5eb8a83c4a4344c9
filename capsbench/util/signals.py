"""SIGINT and SIGTERM end a command with one line and 128 + the signal's number (130, 143), from the console
script's first instruction to its last.

While the console script's own modules import, a signal is held (raised there, it would leave a traceback from the
middle of an import) and raised as soon as the command starts. Within `signals_raise()` the first signal raises
Interrupted or Terminated (both KeyboardInterrupts) where the main thread is, so that every `except KeyboardInterrupt`
that ends runs KILLED and keeps finished work runs for either; later signals are ignored while that clean-up runs. A
KeyboardInterrupt that is neither was raised by code, not by a signal (capsbench.models.failures tells them apart)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) arrived."""

    signum = signal.SIGINT


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived."""

    signum = signal.SIGTERM


class _State:
    """The signals this process received: the first one's number, and whether it was raised yet."""

    received: int | None = None
    raised = False
    depth = 0  # nested signals_raise() blocks


def exit_status(exc: KeyboardInterrupt) -> int:
    """128 + the signal that interrupted: 130 for Ctrl-C (SIGINT), 143 for SIGTERM. A plain KeyboardInterrupt counts
    as the first signal this process received, if any: a library may raise one in place of ours (Ray's waits turn
    whatever a signal handler raises into a plain KeyboardInterrupt)."""
    return 128 + int(getattr(exc, "signum", None) or _State.received or signal.SIGINT)


def received() -> int | None:
    """The number of the first SIGINT or SIGTERM received under these handlers, or None."""
    return _State.received


def _exception(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else Interrupted()


def _hold(signum: int, frame: FrameType | None) -> None:
    """Remember the signal; signals_raise() raises it when the command starts."""
    if _State.received is None:
        _State.received = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    """Raise the first signal where the main thread is; ignore later ones (the clean-up of the first is under way)."""
    if _State.raised:
        return
    _State.received = _State.received or signum
    _State.raised = True
    raise _exception(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def hold_signals() -> None:
    """From now on SIGINT and SIGTERM are remembered, not acted on, until signals_raise() (the console script calls
    this first, before its modules import; a library import never does)."""
    if _main_thread():
        for s in INTERRUPTS:
            signal.signal(s, _hold)


def ignore_signals() -> None:
    """From now on SIGINT and SIGTERM are ignored: the console script's outcome is settled and its process ending
    (Python's own teardown would give a signal its default action, which kills without a word)."""
    if _main_thread():
        for s in INTERRUPTS:
            signal.signal(s, signal.SIG_IGN)


@contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block SIGINT raises Interrupted and SIGTERM Terminated in the main thread, a held signal at once;
    elsewhere the block changes nothing. The handlers before it come back when it ends."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in INTERRUPTS}
    if _State.depth == 0 and previous[signal.SIGINT] is not _hold:  # a new command in a process that is no script
        _State.received, _State.raised = None, False
    _State.depth += 1
    try:
        if _State.received is not None and not _State.raised:
            _raise(_State.received, None)
        yield
    finally:
        _State.depth -= 1
        for s, handler in previous.items():
            signal.signal(s, handler)


def by_signal(exc: KeyboardInterrupt) -> bool:
    """Whether a KeyboardInterrupt may have come from a signal: Interrupted or Terminated, any KeyboardInterrupt once
    one of them was raised (a library may raise a plain one in its place), or where these handlers are not installed
    (a notebook's Ctrl-C raises a plain one)."""
    return isinstance(exc, (Interrupted, Terminated)) or _State.raised or signal.getsignal(signal.SIGINT) is not _raise


@contextmanager
def handlers_kept() -> Iterator[None]:
    """Within the block a library may set its own SIGINT and SIGTERM handlers (Ray's driver sets a Python one that
    exits, and a C one that answers SIGTERM with a stack trace and an abort); when it ends, the handlers from before
    the block are set again, at the C level too. Main thread only; elsewhere it changes nothing."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in INTERRUPTS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(s, handler)


@contextmanager
def spawning() -> Iterator[None]:
    """Around starting worker processes that share this process's terminal (submitit's local jobs): SIGINT is blocked in
    this thread while they start, so that they inherit it blocked and a Ctrl-C reaches only this process, which ends
    them (a KeyboardInterrupt in each would print its traceback). This process handles a SIGINT that arrives meanwhile
    as before, at the latest when the block ends. Main thread only; elsewhere it changes nothing."""
    if not _main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def shielded() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM are ignored, so that ending runs after a first interrupt completes (a
    second Ctrl-C would otherwise leave some of them RUNNING). Main thread only; elsewhere it changes nothing."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in INTERRUPTS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
