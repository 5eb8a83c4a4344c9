"""The `capsbench` console script and `python -m capsbench`: a SIGINT or SIGTERM from here on ends with one line and
130 / 143, even one that arrives while the command line's own modules are still importing (capsbench.util.signals)."""

from capsbench.util.signals import hold_signals

hold_signals()  # first, before the modules below import: a signal is remembered now and acted on when main() starts

from capsbench.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
