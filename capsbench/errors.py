"""User-facing errors: what was wrong, what was expected, how to fix it."""


class CapsbenchError(Exception):
    """An error caused by user input or environment; the CLI prints it on one line and exits 2."""
