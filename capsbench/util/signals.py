"""SIGTERM handled like Ctrl-C, and clean-up that a second signal cannot cut short.

SIGTERM (a scheduler's kill, `kill PID`) raises Terminated, a KeyboardInterrupt, where the main thread is: every
`except KeyboardInterrupt` that ends runs KILLED and keeps finished work runs for it too, and the command exits
128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived."""

    signum = signal.SIGTERM


def exit_status(exc: KeyboardInterrupt) -> int:
    """128 + the signal that interrupted: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated in the main thread (elsewhere the block changes nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def shielded() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM are ignored, so that ending runs after a first interrupt completes (a
    second Ctrl-C would otherwise leave some of them RUNNING). Main thread only; elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in INTERRUPTS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
