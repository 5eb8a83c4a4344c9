"""Tables from tidy records by a suite's layout: cells over seeds, the significantly best cell per column (never
ties, never descriptive columns), published numbers beside measured ones, and the footnotes that explain them."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from capsbench.reporting.frame import (
    UNDERTRAINED,
    draw_note,
    format_sweep,
    ordered_values,
    row_models,
    select,
    value_mask,
)
from capsbench.reporting.model import Flags, Header, Measured, Table, split_parts
from capsbench.reporting.published import PublishedIndex
from capsbench.reporting.significance import Cell, best_row
from capsbench.suites.layout import FlagColumn, Layout, SweepColumns, TableSpec
from capsbench.util.stats import decode_outcomes, decode_values

UNDERTRAINED_MARK = "†"
RowKey = tuple[str, ...]  # (block, row model, dataset, *row sweeps) as text; block "" without blocks
ROW_MODEL = "row_model"  # frame.row_models: the model, with " (training=pgd)" when not trained the standard way


def build_tables(frame: pd.DataFrame, suite: Any, layout: Layout, reported: list[dict[str, Any]] | None = None,
                 notes: Sequence[str] = (), *, max_columns: int | None = None,
                 sweep_values: Mapping[str, Sequence[Any]] | None = None,
                 fits: Callable[[Table], bool] | None = None, intervals: bool = True) -> list[Table]:
    """Every table of the layout that has records (split tables once per value; one too long or too wide in the
    fewest parts of at most `max_columns` value columns, or the table's own limit if lower, that each `fits`: see
    split_parts); the suite's `notes` are the first table's remarks. `sweep_values` keeps only those values of a swept
    column (e.g. {"eps": [0.1, 0.2, 0.3]}); intervals=False: the cells show no 95 % interval (a note gives the
    widest)."""
    index = PublishedIndex(reported or [])
    frame = frame.assign(**{ROW_MODEL: row_models(frame)})
    out: list[Table] = []
    for spec in layout.tables:
        data = select(frame[frame["metric"].isin(spec.metrics)], spec.keep, spec.drop)
        groups = ordered_values(data, spec.split.by, spec.split.order) if spec.split else [None]
        for value in groups:
            part = data
            name, title = spec.name, spec.title
            if spec.split and value is not None:
                part = data[value_mask(data, spec.split.by, (value,)) | data[spec.split.by].isna()]
                name, title = f"{spec.name}-{_slug(format_sweep(value))}", f"{spec.title}: {spec.split.label(value)}"
            if part.empty:
                continue
            fixed = {} if value is None else {spec.split.by: value}
            table = _Builder(frame, part, suite, spec, index, fixed, sweep_values or {}, intervals).build(name, title)
            if table.rows:
                out += split_parts(table, min(spec.max_columns, max_columns or spec.max_columns), fits)
    if out:
        out[0].remarks = list(notes)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "value"


class _Builder:
    """Builds one table: rows from the records, then headers and cells column by column."""

    def __init__(
        self,
        frame: pd.DataFrame,
        data: pd.DataFrame,
        suite: Any,
        spec: TableSpec,
        index: PublishedIndex,
        fixed: dict[str, Any],
        sweep_values: Mapping[str, Sequence[Any]],
        intervals: bool = True,
    ) -> None:
        self.frame, self.data, self.suite, self.spec, self.index, self.fixed = frame, data, suite, spec, index, fixed
        self.sweep_values = sweep_values
        self.models = ordered_values(frame, ROW_MODEL)
        self.datasets = ordered_values(frame, "dataset")
        self.undertrained = _undertrained(frame)
        self.blocks = ordered_values(data, spec.blocks.by, spec.blocks.order) if spec.blocks else []
        self.keys = self._row_keys()
        self.compared = False  # whether any column names a best cell
        self.compared_noisy = False  # whether any compared column is a measurement (not an exact count)
        self.image_tests: set[str] = set()  # the per-image tests behind a compared measurement's bold (IMAGE_TESTS)
        self.table = Table(
            name="",
            title="",
            index_names=self._index_names(),
            rows=[self._labels(k) for k in self.keys],
            headers=[],
            blocked=spec.blocks is not None,
            intervals=intervals,
        )

    def build(self, name: str, title: str) -> Table:
        t = self.table
        t.name, t.title = name, title
        for col in self.spec.columns:
            if isinstance(col, FlagColumn):
                self._flags(col)
            elif isinstance(col, SweepColumns):
                unit = self.suite.metric(col.metric).unit
                group = col.header.format(unit=unit) if "{unit}" in col.header else f"{col.header} ({unit})"
                records = select(self.data[self.data["metric"] == col.metric], col.where, {col.over: col.drop})
                if col.over in self.sweep_values:
                    records = select(records, {col.over: tuple(self.sweep_values[col.over])})
                for v in ordered_values(records, col.over, numeric=True):
                    header = Header(
                        f"{col.metric}|{col.over}={v}|{len(t.headers)}",
                        format_sweep(v),
                        unit,
                        group=group,
                        metric=col.metric,
                        over=col.over,
                    )
                    self._measured(header, select(records, {col.over: v}), {**col.where, col.over: v}, col.compare)
            else:
                header = Header(
                    f"{col.metric}|{len(t.headers)}",
                    col.label,
                    self.suite.metric(col.metric).unit,
                    col.detail,
                    metric=col.metric,
                )
                self._measured(
                    header,
                    select(self.data[self.data["metric"] == col.metric], col.where),
                    dict(col.where),
                    col.compare,
                )
        t.notes = self._notes()
        keep = sorted({i for i, _ in t.cells})
        return _drop_empty_rows(t, keep)

    # rows ---------------------------------------------------------------------------------------------------
    def _row_keys(self) -> list[RowKey]:
        keys: set[RowKey] = set()
        for r in self.data.itertuples(index=False):
            block = getattr(r, self.spec.blocks.by) if self.spec.blocks else ""
            if self.spec.blocks and pd.isna(block):
                continue  # a record of every block (e.g. clean accuracy beside per-attack rows) defines no row
            keys.add(self._key(r, block))
        block_pos = {format_sweep(b): i for i, b in enumerate(self.blocks)}
        model_pos = {m: i for i, m in enumerate(self.models)}
        data_pos = {d: i for i, d in enumerate(self.datasets)}

        sweep_pos = [
            {format_sweep(v): i for i, v in enumerate(ordered_values(self.data, c, numeric=True))}
            for c in self.spec.rows
        ]

        def order(k: RowKey) -> tuple:  # blocks, models and datasets as declared or recorded; numbers ascending
            sweeps = tuple(pos.get(v, len(pos)) for pos, v in zip(sweep_pos, k[3:]))
            return (block_pos.get(k[0], 0), model_pos[k[1]], data_pos[k[2]], *sweeps)

        return sorted(keys, key=order)

    def _key(self, r: Any, block: Any) -> RowKey:
        sweeps = tuple("" if pd.isna(getattr(r, c)) else format_sweep(getattr(r, c)) for c in self.spec.rows)
        return ("" if block == "" else format_sweep(block), getattr(r, ROW_MODEL), r.dataset, *sweeps)

    def _index_names(self) -> list[str]:
        head = [self.spec.blocks.header or self.spec.blocks.by] if self.spec.blocks else []
        return [*head, "model", *self.spec.rows]

    def _labels(self, key: RowKey) -> tuple[str, ...]:
        model = key[1] + (f" / {key[2]}" if len(self.datasets) > 1 else "")
        model += UNDERTRAINED_MARK if (key[1], key[2]) in self.undertrained else ""
        block = (
            [self.spec.blocks.label(next(b for b in self.blocks if format_sweep(b) == key[0]))]
            if self.spec.blocks
            else []
        )
        return (*block, model, *(v or "–" for v in key[3:]))

    # cells --------------------------------------------------------------------------------------------------
    def _buckets(self, records: pd.DataFrame) -> dict[RowKey, list[Any]]:
        out: dict[RowKey, list[Any]] = defaultdict(list)
        for r in records.itertuples(index=False):
            block = getattr(r, self.spec.blocks.by) if self.spec.blocks else ""
            key = self._key(r, "" if self.spec.blocks and pd.isna(block) else block)
            if self.spec.blocks and key[0] == "":
                for b in self.blocks:  # one value shared by every block
                    out[(format_sweep(b), *key[1:])].append(r)
            else:
                out[key].append(r)
        return out

    def _measured(self, header: Header, records: pd.DataFrame, context: dict[str, Any], compare: bool) -> None:
        t, metric = self.table, self.suite.metric(header.metric)
        buckets = self._buckets(records)
        per_block: dict[str, dict[str, Cell]] = defaultdict(dict)
        cells = {}
        for i, key in enumerate(self.keys):
            rows = buckets.get(key, [])
            if not rows:
                continue
            cell = self._cell(header, key, rows)
            cells[i] = cell
            if (key[1], key[2]) not in self.undertrained:
                per_block[key[0]][str(i)] = _significance_cell(rows)
        if not cells:
            return
        t.headers.append(header)
        for i, cell in cells.items():
            t.cells[(i, header.key)] = cell
        if not compare:
            return  # a breakdown: compared neither between rows nor with papers
        if metric.higher_is_better is not None:
            self.compared = True
            self.compared_noisy |= not metric.exact
            if not metric.exact:
                self.image_tests |= {image_test(c) for block in per_block.values() for c in block.values()} - {None}
            for block in per_block.values():
                verdict = best_row(block, higher_is_better=metric.higher_is_better, exact=metric.exact)
                if verdict.best is not None:
                    t.best.add((int(verdict.best), header.key))
        self._published(header, context, buckets)

    def _cell(self, header: Header, key: RowKey, rows: list[Any]) -> Measured:
        seeds = [int(r.seed) for r in rows]
        if len(set(seeds)) != len(seeds):
            varying = [
                c
                for c in self.suite.sweep_columns
                if c not in self.spec.describe and len({format_sweep(getattr(r, c)) for r in rows}) > 1
            ]
            raise ValueError(
                f"table {self.spec.name!r}, column {header.label!r}, row {key[1]}: several records per seed "
                f"differ in {varying or 'nothing'}; fix the suite's layout (add them to `where`, `rows` or `describe`)"
            )
        values = [float(r.value) for r in rows]
        std = float(pd.Series(values).std()) if len(values) > 1 else None
        interval = None
        if len(rows) == 1 and _has(rows[0], "ci_low"):
            interval = (float(rows[0].ci_low), float(rows[0].ci_high), int(float(rows[0].n)))
        return Measured(sum(values) / len(values), std, len(values), interval)

    def _published(self, header: Header, context: dict[str, Any], buckets: dict[RowKey, list[Any]]) -> None:
        t = self.table
        found = {}
        for i, key in enumerate(self.keys):
            row_context = {**self.fixed, **context, **dict(zip(self.spec.rows, key[3:]))}
            if self.spec.blocks:
                row_context[self.spec.blocks.by] = key[0]
            described = {
                c: {format_sweep(getattr(r, c)) for r in buckets.get(key, []) if not pd.isna(getattr(r, c))}
                for c in self.spec.describe
            }
            entry = self.index.find(
                key[1], key[2], header.metric, {k: v for k, v in row_context.items() if v != ""}, described
            )
            if entry is not None:
                found[i] = entry
        if not found:
            return
        label, detail = (f"{header.over}={header.label}", "published") if header.over else (header.label, "published")
        detail += f", {header.detail}" if header.detail else ""
        pub = Header(f"{header.key}|published", label, header.unit, detail, header.group, "published", header.metric)
        t.headers.append(pub)
        for i, entry in found.items():
            t.cells[(i, pub.key)] = self.index.cell(entry, t.references)

    def _flags(self, col: FlagColumn) -> None:
        records = self.data[self.data["metric"] == col.metric]
        fired: dict[int, set[str]] = {}
        for key, rows in self._buckets(records).items():
            if key in self.keys:
                fired[self.keys.index(key)] = {getattr(r, col.by) for r in rows if float(r.value) == 1.0}
        if not fired:
            return
        ran = set(records[col.by].dropna())  # the checks the records hold: one that never ran is not listed
        header = Header(f"{col.metric}|flags", col.label, kind="flags",
                        detail="; ".join(f"{col.symbols[c]} = {c} ({text})" for c, text in col.explain.items()
                                         if c in ran))
        self.table.headers.append(header)
        for i, checks in fired.items():
            fired = tuple(c for c in col.explain if c in checks)
            self.table.cells[(i, header.key)] = Flags(tuple(col.symbols[c] for c in fired), fired)

    # notes --------------------------------------------------------------------------------------------------
    def _notes(self) -> list[str]:
        t, notes = self.table, []
        for h in t.headers:
            if h.kind == "flags":
                notes.append(flags_note(h))
        notes += list(self.spec.notes)
        for c in self.spec.describe:
            values = ordered_values(self.data, c)
            if values:
                notes.append(f"{c}: {', '.join(format_sweep(v) for v in values)}")
        if any(UNDERTRAINED_MARK in label for row in t.rows for label in row):
            notes.append(
                f"{UNDERTRAINED_MARK} undertrained: validation accuracy stayed below the floor; never compared"
            )
        notes.append(_cells_note(t, self.compared, self.compared_noisy, self.image_tests))
        if (drawn := draw_note(self.data)) is not None:
            notes.append(drawn)
        return notes


def flags_note(h: Header) -> str:
    """The legend of a flags column (its detail lists the symbol of every check the records hold)."""
    return f"{h.label}: the checks that fired in any seed, of those that ran: {h.detail}; ok = none fired"


NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def seeds_words(seeds: list[int]) -> str:
    """'one seed', 'three seeds', 'two or three seeds' (the training seeds behind the cells), numbers as words."""
    words = [NUMBERS[k] if k < len(NUMBERS) else str(k) for k in seeds]
    if len(words) == 1:
        return f"{words[0]} seed{'s' if seeds[0] != 1 else ''}"
    return f"{', '.join(words[:-1])} or {words[-1]} seeds"


IMAGE_TESTS = {  # the per-image test a compared cell's bold also needs, as capsbench.reporting.significance runs it
    "mcnemar": "McNemar's test on the distinct test images (each once, whatever the seeds)",
    "signed_rank": "Wilcoxon's signed-rank test on the distinct test images (each image's distance averaged over the "
                   "seeds)",
}


def image_test(cell: Cell) -> str | None:
    """Which per-image test a cell's comparison runs: on outcomes (right or wrong per image), else on per-image
    values (distances), else none."""
    return "mcnemar" if cell.outcomes else "signed_rank" if cell.per_image else None


def _cells_note(t: Table, compared: bool, noisy: bool, image_tests: set[str] = frozenset()) -> str:
    measured = [c for c in t.cells.values() if isinstance(c, Measured)]
    seeds = sorted({c.seeds for c in measured})
    images = sorted({c.interval[2] for c in measured if c.interval})
    several = max(seeds, default=1) > 1
    text = seeds_words(seeds) + ("; mean ± sample std" if several else "")
    if len(seeds) > 1:
        text += " ((n=k): a cell with fewer seeds)"
    lead = "; a one-seed cell: " if several else ": "
    counted = "/".join(f"{n:,}" for n in images)
    units = {h.key: h.unit for h in t.headers}
    shares = all(units.get(key) == "%" for (_, key), c in t.cells.items() if isinstance(c, Measured) and c.interval)
    # else the cells with an interval are medians of per-image values (a distance)
    kind = "Wilson" if shares else "distribution-free (order-statistic)"
    value = "value" if shares else "the median"
    if images and t.intervals:
        text += f"{lead}{value} and its 95 % {kind} interval over {counted} test images"
    elif images:
        wide = max((c.interval[1] - c.interval[0]) / 2 for c in measured if c.interval)
        text += (f"{lead}{value} over {counted} test images (95 % {kind} intervals within "
                 f"±{wide:.1f}{' points' if shares else ''})")
    if compared and noisy and max(seeds, default=1) < 2:
        text += "; nothing is bold: one seed compares these weights, not the architectures (seeds=[0,1,2] does)"
    elif compared and noisy:
        tests = ["a t-test on the per-seed differences"] + [IMAGE_TESTS[k] for k in sorted(image_tests)]
        text += (f"; bold: strictly ahead of the runner-up in every seed, with {' and '.join(tests)}"
                 f"{' each' if len(tests) > 2 else ' both' if len(tests) == 2 else ''} p < 0.05; nothing bold where no "
                 "model is")
    elif compared:
        text += "; bold: the best exact count (no noise)"
    return text


def _significance_cell(rows: list[Any]) -> Cell:
    cell = Cell()
    for r in rows:
        cell.values[int(r.seed)] = float(r.value)
        if _has(r, "outcomes") and isinstance(r.outcomes, str):
            cell.outcomes[int(r.seed)] = decode_outcomes(r.outcomes, int(float(r.n)))
        if _has(r, "per_image") and isinstance(r.per_image, str):
            cell.per_image[int(r.seed)] = decode_values(r.per_image, int(float(r.n)))
    return cell


def _has(r: Any, column: str) -> bool:
    v = getattr(r, column, None)
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and not pd.isna(v)


def _undertrained(frame: pd.DataFrame) -> set[tuple[str, str]]:
    if UNDERTRAINED not in frame:
        return set()
    flagged = frame[frame[UNDERTRAINED].fillna(False).astype(bool)]
    return set(zip(flagged[ROW_MODEL], flagged["dataset"]))


def _drop_empty_rows(t: Table, keep: list[int]) -> Table:
    new = {old: i for i, old in enumerate(keep)}
    t.rows = [t.rows[i] for i in keep]
    t.cells = {(new[i], k): c for (i, k), c in t.cells.items()}
    t.best = {(new[i], k) for i, k in t.best}
    return t
