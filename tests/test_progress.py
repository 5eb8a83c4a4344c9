"""Progress off a terminal: a log line when a stage starts (with the count and the time left), none with --quiet."""

import logging

from capsbench.util import progress
from capsbench.util.progress import Progress


def test_stages_are_logged_with_counts_off_a_terminal_and_silenced_by_quiet(caplog, monkeypatch):
    clock = iter([0.0, 0.0, 10.0, 10.0, 10.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="capsbench.util.progress"):
        with Progress("attacks capsnet s0", 2) as bar:
            bar.update()
            bar.note("pgd on 980 images")
    assert caplog.messages == ["attacks capsnet s0: 1/2 done, about 0.2 min left (pgd on 980 images)"]

    caplog.clear()
    progress.set_quiet(True)
    try:
        with caplog.at_level(logging.INFO, logger="capsbench.util.progress"), Progress("attacks", 2) as bar:
            bar.note("fgsm")
            bar.update(2)
    finally:
        progress.set_quiet(False)
    assert caplog.messages == []
