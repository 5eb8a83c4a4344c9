"""What a suite's tables and figures look like, declared next to its metrics: rows, columns, blocks, splits and
the figures drawn from the same records. Every renderer (Markdown, LaTeX, CSV) reads the same declaration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Values = Mapping[str, tuple[Any, ...]]  # sweep column -> values


@dataclass(frozen=True)
class Column:
    """One numeric column: `metric` at the fixed sweep values `where` (e.g. part=total), headed by `label`, an
    optional `detail` line (e.g. "batch 1") and the metric's unit."""

    metric: str
    label: str
    where: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""
    compare: bool = True  # False: a breakdown (parts, modules) whose rows are not competing; nothing is bold


@dataclass(frozen=True)
class SweepColumns:
    """One column per value of the sweep column `over` (ascending), all under the group header `header` (the
    metric's unit is appended); values in `drop` are never shown (e.g. eps = 0, which equals clean accuracy)."""

    metric: str
    over: str
    header: str
    where: Mapping[str, Any] = field(default_factory=dict)
    drop: tuple[Any, ...] = ()
    compare: bool = True


@dataclass(frozen=True)
class FlagColumn:
    """A narrow text column: the short symbol of every check that fired (`metric` records of value 1, the check
    named by the sweep column `by`) in any seed, with `explain` turned into a footnote legend."""

    metric: str
    by: str
    symbols: Mapping[str, str]
    explain: Mapping[str, str]
    label: str = "flags"


TableColumn = Column | SweepColumns | FlagColumn


@dataclass(frozen=True)
class Group:
    """Rows grouped (blocks) or tables split by the values of a sweep column: `order` first, then the others in
    the order the records give them; `labels` renames values for display."""

    by: str
    order: tuple[Any, ...] = ()
    labels: Mapping[Any, str] = field(default_factory=dict)
    header: str = ""  # name of the block column; default: `by`

    def label(self, value: Any) -> str:
        if value in self.labels:
            return self.labels[value]
        return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class TableSpec:
    """One table of a suite. Rows are models (and datasets when several), extended by the sweep columns in
    `rows` (e.g. r); `blocks` groups rows under a sweep column's values; `split` makes one table per value.

    Args:
        name: file stem and LaTeX label suffix (letters, digits, '_' and '-').
        title: caption, one sentence without a final period.
        columns: the columns in order; a published number, where baselines/ has one, follows its column.
        keep / drop: records are kept only with these sweep values / left out with these.
        describe: sweep columns whose values a footnote states instead of columns (device, dtype, test_set).
        notes: fixed footnotes (e.g. "FLOPs = 2 x MACs").
        max_columns: more value columns than this are split into parts that repeat the row labels.
    """

    name: str
    title: str
    columns: tuple[TableColumn, ...]
    rows: tuple[str, ...] = ()
    blocks: Group | None = None
    split: Group | None = None
    keep: Values = field(default_factory=dict)
    drop: Values = field(default_factory=dict)
    describe: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    max_columns: int = 8

    @property
    def metrics(self) -> set[str]:
        return {c.metric for c in self.columns}


@dataclass(frozen=True)
class SweepPlot:
    """Metrics against the sweep column `x`: one panel per metric and `facet` value, one line per model (rows
    without an x value, such as a CNN beside CapsNet's r = 1..5, become dashed reference lines). The band is the
    95 % Wilson interval for one seed, mean ± std over several."""

    name: str
    metrics: tuple[str, ...]
    x: str
    facet: Group | None = None
    keep: Values = field(default_factory=dict)
    drop: Values = field(default_factory=dict)
    xlabel: str = ""
    ylabels: tuple[str, ...] = ()  # one per metric; default: the metric and its unit
    share_x: bool = True  # False where facets have different x scales (rotation in degrees beside scale factors)


@dataclass(frozen=True)
class Layout:
    """A suite's tables (the first is the headline) and figures."""

    tables: tuple[TableSpec, ...]
    figures: tuple[SweepPlot, ...] = ()


def default_layout(metrics: tuple[Any, ...]) -> Layout:
    """One table with a column per metric, for a suite that declares no layout (metrics without sweeps)."""
    return Layout((TableSpec("main", "Results", tuple(Column(m.name, m.name.replace("_", " ")) for m in metrics)),))
