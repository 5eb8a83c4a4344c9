"""A table as a pandas frame (rows indexed by their labels, columns by (column, field)) and as one wide CSV per table:
the row labels, then per column its mean, std, seeds, interval and whether it is the significantly best cell;
published columns carry value, std and citation."""

from __future__ import annotations

import io

import pandas as pd

from capsbench.reporting.formatting import header_text
from capsbench.reporting.model import Flags, Header, Measured, Published, Table


def table_frame(table: Table) -> pd.DataFrame:
    """The table's numbers unrounded: one row per table row, indexed by its labels (e.g. model, or attack and model);
    columns (column, field), e.g. ("eps=0.1", "mean"), ("eps=0.1", "ci_low"), ("clean accuracy (%)", "std")."""
    columns = {(_name(h), field): values for h in table.headers for field, values in _fields(table, h).items()}
    index = pd.MultiIndex.from_tuples(table.rows, names=table.index_names) if len(table.index_names) > 1 \
        else pd.Index([r[0] for r in table.rows], name=table.index_names[0])
    frame = pd.DataFrame(columns, index=index)
    frame.columns = pd.MultiIndex.from_tuples(list(columns), names=["column", "field"])
    return frame


def render_table(table: Table) -> str:
    """The table as CSV text (numbers unrounded): the row labels, then `<column> <field>` per column and field."""
    frame = table_frame(table)
    frame.columns = [f"{column} {field}".strip() for column, field in frame.columns]
    buf = io.StringIO()
    frame.reset_index().to_csv(buf, index=False)
    return buf.getvalue()


def _name(h: Header) -> str:
    if h.kind == "flags":
        return h.label  # its detail is the legend
    return f"{h.over}={h.label}" if h.over else header_text(h.label, h.unit, h.detail)


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
