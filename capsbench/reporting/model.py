"""A built table, independent of its output format: headers, row labels, typed cells, the significantly best cells
and the footnotes; long tables are split into parts here so that every format splits them alike."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Measured:
    """A measured cell: mean over seeds, sample std (None for one seed), the number of seeds, and for one seed
    its 95 % Wilson interval (low, high in %, images) where the records carry one."""

    mean: float
    std: float | None
    seeds: int
    interval: tuple[float, float, int] | None = None


@dataclass(frozen=True)
class Published:
    """A number a paper reports, as printed there; `ref` numbers its citation footnote (1-based)."""

    value: float
    std: float | None
    ref: int


@dataclass(frozen=True)
class Flags:
    """The symbols of the checks that fired (empty: none did), and the checks' names in the same order."""

    symbols: tuple[str, ...]
    checks: tuple[str, ...] = ()


Cell = Measured | Published | Flags


@dataclass(frozen=True)
class Header:
    """One value column. `kind` is "measured", "published" or "flags"; `group` is the shared header above it. A flags
    column's `detail` is its legend: every symbol and the check it stands for."""

    key: str
    label: str
    unit: str = ""
    detail: str = ""
    group: str = ""
    kind: str = "measured"
    metric: str = ""
    over: str = ""  # the sweep column whose value `label` is (columns under a group header)


@dataclass
class Table:
    """Rows are tuples of labels, one per index level (e.g. attack, model); cells are keyed by (row, header key)."""

    name: str
    title: str
    index_names: list[str]
    rows: list[tuple[str, ...]]
    headers: list[Header]
    cells: dict[tuple[int, str], Cell] = field(default_factory=dict)
    best: set[tuple[int, str]] = field(default_factory=set)
    blocked: bool = False  # the first index level names blocks of rows (e.g. the attack)
    references: list[str] = field(default_factory=list)  # citation of ref i at index i - 1
    notes: list[str] = field(default_factory=list)  # what a reader of the table needs: legends, n, seeds, bold
    remarks: list[str] = field(default_factory=list)  # the suite's diagnostics under its first table (flags fired)

    @property
    def max_seeds(self) -> int:
        return max((c.seeds for c in self.cells.values() if isinstance(c, Measured)), default=1)

    def is_best(self, row: int, key: str) -> bool:
        return (row, key) in self.best

    def block_start(self, row: int) -> bool:
        """Whether `row` opens a new block (never the first row)."""
        return self.blocked and row > 0 and self.rows[row][0] != self.rows[row - 1][0]

    def shown_labels(self, row: int) -> tuple[str, ...]:
        """The row's labels with those repeated from the row above left blank (every level but the last)."""
        labels = self.rows[row]
        if row == 0:
            return labels
        above, out, same = self.rows[row - 1], [], True
        for level, label in enumerate(labels):
            same = same and label == above[level] and level < len(labels) - 1
            out.append("" if same else label)
        return tuple(out)


def split_parts(table: Table, max_columns: int) -> list[Table]:
    """The table as parts of at most `max_columns` value columns, each repeating the row labels. Columns under one
    group header stay together where they fit (a longer group is split evenly: 11 columns become 6 + 5) and a
    published column stays with its measured one. Rows left without a value in a part are dropped. A flags column
    (per row, narrow; LaTeX sets it as marks) is not counted and follows every part."""
    flags = [h for h in table.headers if h.kind == "flags"]
    values = [h for h in table.headers if h.kind != "flags"]
    if len(values) <= max_columns:
        return [table]
    units = _units(values, max_columns)
    even = math.ceil(len(values) / math.ceil(len(values) / max_columns))
    chunks = min((_pack(units, even), _pack(units, max_columns)), key=len)  # even parts unless that needs more
    parts = []
    for n, headers in enumerate(chunks, 1):
        name = table.name if n == 1 else f"{table.name}-{n}"
        parts.append(_subset(table, headers + flags, name, f"{table.title} (part {n} of {len(chunks)})"))
    return parts


def _pack(units: list[list[Header]], limit: int) -> list[list[Header]]:
    chunks: list[list[Header]] = [[]]
    for unit in units:
        if chunks[-1] and len(chunks[-1]) + len(unit) > limit:
            chunks.append([])
        chunks[-1].extend(unit)
    return chunks


def _units(headers: list[Header], max_columns: int) -> list[list[Header]]:
    """Runs of columns that should stay together: a group's columns (evenly split when longer than max_columns),
    or one column; a published column joins the column before it."""
    runs: list[list[Header]] = []
    for h in headers:
        if runs and (h.kind == "published" or (h.group and h.group == runs[-1][-1].group)):
            runs[-1].append(h)
        else:
            runs.append([h])
    units = []
    for run in runs:
        k = math.ceil(len(run) / max_columns)
        size = math.ceil(len(run) / k)
        pieces = [run[i:i + size] for i in range(0, len(run), size)]
        for a, b in zip(pieces, pieces[1:]):  # never leave a published column at the start of a piece
            while b and b[0].kind == "published":
                a.append(b.pop(0))
        units += [p for p in pieces if p]
    return units


def _subset(table: Table, headers: list[Header], name: str, title: str) -> Table:
    keys = {h.key for h in headers}
    kept = [i for i in range(len(table.rows)) if any((i, k) in table.cells for k in keys)]
    new = {old: new for new, old in enumerate(kept)}
    refs = sorted({c.ref for (i, k), c in table.cells.items() if k in keys and i in new and isinstance(c, Published)})
    renumber = {old: new for new, old in enumerate(refs, 1)}
    cells = {}
    for (i, k), c in table.cells.items():
        if k in keys and i in new:
            cells[(new[i], k)] = replace(c, ref=renumber[c.ref]) if isinstance(c, Published) else c
    return Table(
        name=name, title=title, index_names=table.index_names, rows=[table.rows[i] for i in kept], headers=headers,
        cells=cells, best={(new[i], k) for i, k in table.best if k in keys and i in new},
        blocked=table.blocked,
        references=[table.references[r - 1] for r in refs], notes=table.notes, remarks=table.remarks,
    )
