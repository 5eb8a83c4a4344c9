"""capsbench's version, kept equal to pyproject.toml's (a test checks it against the installed metadata)."""

__version__ = "0.1.0"
