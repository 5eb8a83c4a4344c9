"""A built table, independent of its output format: headers, row labels, typed cells, the significantly best cells
and the footnotes; long tables are split into parts here so that every format splits them alike."""

from __future__ import annotations

import functools
from collections.abc import Callable
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
    intervals: bool = True  # False: renderers leave each cell's 95 % interval out (a compact table; a note says why)

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


def split_parts(table: Table, max_columns: int, fits: Callable[[Table], bool] | None = None) -> list[Table]:
    """The table in as few parts as hold every value column (at most `max_columns` each, and each one that `fits`),
    each repeating the row labels: contiguous runs of columns, cut between groups (e.g. eps columns) where possible, as
    even as possible, never a part of one column when there are more; a published column stays with its measured one.
    Rows left without a value in a part are dropped. A flags column (per row, narrow; LaTeX sets it as marks) is not
    counted and follows every part."""
    flags = [h for h in table.headers if h.kind == "flags"]
    atoms = _atoms([h for h in table.headers if h.kind != "flags"])
    columns = sum(len(a) for a in atoms)
    if columns <= max_columns and (fits is None or fits(table)):
        return [table]

    def feasible(i: int, j: int) -> bool:  # atoms[i:j] as one part
        width = sum(len(a) for a in atoms[i:j])
        return width <= max_columns and (width > 1 or columns == 1) and (
            fits is None or fits(_subset(table, [h for a in atoms[i:j] for h in a] + flags, table.name, table.title)))

    ok = functools.cache(feasible)
    for k in range(2, len(atoms) + 1):
        cuts = _best_cuts(atoms, k, ok, columns / k)
        if cuts is not None:
            break
    else:
        cuts = list(range(1, len(atoms)))  # one atom a part: the most that can be done
    bounds = list(zip([0, *cuts], [*cuts, len(atoms)]))
    parts = []
    for n, (i, j) in enumerate(bounds, 1):
        headers = [h for a in atoms[i:j] for h in a]
        name = table.name if n == 1 else f"{table.name}-{n}"
        parts.append(_subset(table, headers + flags, name, f"{table.title} ({_part_label(headers, n, len(bounds))})"))
    return parts


def _atoms(headers: list[Header]) -> list[list[Header]]:
    """Columns that never part: a measured column and the published one after it."""
    atoms: list[list[Header]] = []
    for h in headers:
        if atoms and h.kind == "published":
            atoms[-1].append(h)
        else:
            atoms.append([h])
    return atoms


def _best_cuts(atoms: list[list[Header]], k: int, ok: Callable[[int, int], bool], even: float) -> list[int] | None:
    """Where to cut the atoms into k feasible parts: fewest cuts inside a group (or a run of ungrouped columns), then
    the most even widths of the parts such a cut makes, then the widest first parts; None when no such cut exists."""
    n = len(atoms)
    inside = [0 < i < n and atoms[i][0].group == atoms[i - 1][0].group for i in range(n + 1)]  # "" == "": plain
    best: dict[tuple[int, int], tuple[float, list[int]]] = {(0, 0): (0.0, [])}  # (atoms, parts) -> cost, cuts
    for parts in range(1, k + 1):
        for j in range(parts, n + 1):
            options = []
            for i in range(j - 1, parts - 2, -1):  # later cuts first: of two as even, the first part wider
                if (i, parts - 1) in best and ok(i, j):
                    cost, cuts = best[(i, parts - 1)]
                    width = sum(len(a) for a in atoms[i:j])
                    split = (i > 0 and inside[i]) or (j < n and inside[j])  # the part cuts a group: keep it even
                    cost += (i > 0 and inside[i]) + 0.01 * split * (width - even) ** 2
                    options.append((cost, [*cuts, i] if i > 0 else cuts))
            if options:
                best[(j, parts)] = min(options, key=lambda o: o[0])
    found = best.get((n, k))
    return None if found is None else found[1]


def _part_label(headers: list[Header], n: int, k: int) -> str:
    """"part 2 of 3", with the columns it holds where one sweep names them: "part 1 of 2: clean, eps=0.05-0.15"."""
    sweeps = [h for h in headers if h.over and h.kind == "measured"]
    if not sweeps or len({(h.over, h.group) for h in sweeps}) > 1:
        return f"part {n} of {k}"
    plain = [h.label for h in headers if not h.over and h.kind == "measured"]
    span = sweeps[0].label if len(sweeps) == 1 else f"{sweeps[0].label}–{sweeps[-1].label}"
    return f"part {n} of {k}: " + ", ".join([*plain, f"{sweeps[0].over}={span}"])


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
        blocked=table.blocked, intervals=table.intervals,
        references=[table.references[r - 1] for r in refs], notes=table.notes, remarks=table.remarks,
    )
