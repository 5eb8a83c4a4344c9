"""One wide CSV per table, in the table's layout: the row labels, then per column its mean, std, seeds, interval and
whether it is the significantly best cell; published columns carry value, std and citation."""

from __future__ import annotations

import io

import pandas as pd

from capsbench.reporting.formatting import header_text
from capsbench.reporting.model import Flags, Header, Measured, Published, Table


def render_table(table: Table) -> str:
    """The table as CSV text (numbers unrounded)."""
    out: dict[str, list[object]] = {name: [] for name in table.index_names}
    for i, labels in enumerate(table.rows):
        for name, label in zip(table.index_names, labels):
            out[name].append(label)
    for h in table.headers:
        for field, values in _fields(table, h).items():
            out[f"{_name(h)} {field}".strip()] = values
    buf = io.StringIO()
    pd.DataFrame(out).to_csv(buf, index=False)
    return buf.getvalue()


def _name(h: Header) -> str:
    if h.kind == "flags":
        return h.label  # its detail is the legend
    return f"{h.group} {h.over}={h.label}" if h.over else header_text(h.label, h.unit, h.detail)


def _fields(table: Table, h: Header) -> dict[str, list[object]]:
    cells = [table.cells.get((i, h.key)) for i in range(len(table.rows))]
    if h.kind == "flags":
        return {"": [",".join(c.symbols) if isinstance(c, Flags) else None for c in cells]}
    if h.kind == "published":
        return {
            "value": [c.value if isinstance(c, Published) else None for c in cells],
            "std": [c.std if isinstance(c, Published) else None for c in cells],
            "citation": [table.references[c.ref - 1] if isinstance(c, Published) else None for c in cells],
        }
    measured = [c if isinstance(c, Measured) else None for c in cells]
    return {
        "mean": [c.mean if c else None for c in measured],
        "std": [c.std if c else None for c in measured],
        "seeds": [c.seeds if c else None for c in measured],
        "ci_low": [c.interval[0] if c and c.interval else None for c in measured],
        "ci_high": [c.interval[1] if c and c.interval else None for c in measured],
        "best": [table.is_best(i, h.key) if c else None for i, c in enumerate(measured)],
    }
