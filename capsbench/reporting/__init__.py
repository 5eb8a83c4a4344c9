"""Reporting: per-suite layouts (layout.py), tables built from records with significance (tables.py), Markdown,
LaTeX and CSV renderers, figures, a suite's files (outputs.py) and the assembled report (document.py).

Importing the package is cheap: the names below load their modules (pandas, matplotlib) on first use."""

from __future__ import annotations

from typing import Any

from capsbench.util.lazy import load

_LAZY = {
    "write_outputs": "capsbench.reporting.outputs:write_outputs",
    "write_suite": "capsbench.reporting.outputs:write_suite",
    "save_figure": "capsbench.reporting.figures:save_figure",
}


def __getattr__(name: str) -> Any:
    """`from capsbench.reporting import write_outputs` imports the module that defines it."""
    if name in _LAZY:
        return load(_LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
