"""Tables from tidy records: mean ± std over seeds, best per column in bold, published numbers beside measured ones."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from capsbench.atomic import write_text
from capsbench.plots import save_figure, sweep_figure
from capsbench.significance import Cell, best_row
from capsbench.stats import decode_outcomes
from capsbench.suites import Suite

RECORD_COLUMNS = ["suite", "model", "dataset", "seed", "metric", "value"]
UNCERTAINTY_COLUMNS = ["n", "ci_low", "ci_high", "outcomes"]  # accuracy records: images, 95 % Wilson interval, per image
UNDERTRAINED = "undertrained"  # True on every record of a model whose validation accuracy stayed below the floor


def records_frame(records: list[dict[str, Any]], suite: type[Suite]) -> pd.DataFrame:
    """Tidy records as a DataFrame with the fixed columns first, then the suite's sweep columns, then the uncertainty
    and detail columns the records carry."""
    frame = pd.DataFrame.from_records(records)
    for col in [*RECORD_COLUMNS, *suite.sweep_columns]:
        if col not in frame:
            frame[col] = pd.NA
    extra = [c for c in (*UNCERTAINTY_COLUMNS, *suite.detail_columns, UNDERTRAINED) if c in frame]
    return frame[[*RECORD_COLUMNS, *suite.sweep_columns, *extra]]


def aggregate(frame: pd.DataFrame, suite: type[Suite]) -> pd.DataFrame:
    """Mean, sample std (ddof=1; NaN for one seed) and n over seeds per (model, dataset, metric, sweep); with the
    images per seed and, for one seed, its Wilson interval where the records carry them."""
    keys = ["model", "dataset", "metric", *suite.sweep_columns]
    grouped = frame.groupby(keys, dropna=False, sort=False)
    agg = grouped["value"].agg(mean="mean", std="std", n="count")
    if "n" in frame:
        agg["images"] = grouped["n"].max()
        agg["ci_low"], agg["ci_high"] = grouped["ci_low"].first(), grouped["ci_high"].first()
    return agg.reset_index()


@dataclass(frozen=True)
class ReportedCell:
    """A published number placed beside a measured cell; `ref` numbers its footnote (1-based)."""

    value: float
    std: float | None
    ref: int


@dataclass
class Table:
    """A comparison table: one row per model (and dataset), one column per metric and sweep value."""

    index: list[str]
    columns: list[str]
    mean: pd.DataFrame
    std: pd.DataFrame
    n: pd.DataFrame
    units: dict[str, str]
    best: dict[str, set[str]]  # column -> the row that is significantly best (empty: nothing significant)
    reported: dict[tuple[str, str], ReportedCell] = field(default_factory=dict)  # (row, column) -> published
    footnotes: list[str] = field(default_factory=list)  # footnote text of ref i at index i - 1
    interval: dict[tuple[str, str], tuple[float, float, int]] = field(default_factory=dict)  # one seed: (lo, hi, images)
    undertrained: set[str] = field(default_factory=set)  # rows never compared

    @property
    def reported_columns(self) -> set[str]:
        return {col for _, col in self.reported}


def comparison_table(frame: pd.DataFrame, suite: type[Suite], reported: list[dict[str, Any]] | None = None) -> Table:
    """Pivot records (a records_frame) into a table; the best cell per column is the one that beats the runner-up
    significantly (capsbench.significance). `reported` rows ({model, dataset, metric, <sweep>, value, std,
    footnote}) become published cells where the measured table has the same row and column."""
    agg = aggregate(frame, suite)
    agg["column"] = agg.apply(lambda r: _column_label(r, suite), axis=1)
    datasets = list(agg["dataset"].unique())
    agg["row"] = _row_labels(agg, datasets)
    rows = list(dict.fromkeys(agg["row"]))
    columns = list(dict.fromkeys(agg["column"]))
    pivot = {s: agg.pivot(index="row", columns="column", values=s).reindex(index=rows, columns=columns) for s in ("mean", "std", "n")}
    units = {c: suite.metric(m).unit for c, m in zip(agg["column"], agg["metric"])}
    undertrained = _undertrained_rows(frame, datasets)
    table = Table(rows, columns, pivot["mean"], pivot["std"], pivot["n"], units, _best_cells(frame, suite, datasets, undertrained),
                  undertrained=undertrained)
    if "images" in agg:
        for r in agg[(agg["n"] == 1) & agg["ci_low"].notna()].itertuples():
            table.interval[(r.row, r.column)] = (float(r.ci_low), float(r.ci_high), int(r.images))
    _place_reported(table, reported or [], suite, datasets)
    return table


def _undertrained_rows(frame: pd.DataFrame, datasets: list[str]) -> set[str]:
    if UNDERTRAINED not in frame:
        return set()
    flagged = frame[frame[UNDERTRAINED].fillna(False).astype(bool)]
    return set(_row_labels(flagged, datasets)) if len(flagged) else set()


def _best_cells(frame: pd.DataFrame, suite: type[Suite], datasets: list[str], undertrained: set[str]) -> dict[str, set[str]]:
    """Per column the significantly best row, if any (direction from the metric; descriptive metrics have none)."""
    frame = frame.assign(row=_row_labels(frame, datasets), column=frame.apply(lambda r: _column_label(r, suite), axis=1))
    best: dict[str, set[str]] = {}
    for (col, metric), part in frame.groupby(["column", "metric"], sort=False):
        m = suite.metric(metric)
        if m.higher_is_better is None:
            continue
        cells: dict[str, Cell] = {}
        for r in part.itertuples():
            cell = cells.setdefault(r.row, Cell())
            cell.values[int(r.seed)] = float(r.value)
            if "outcomes" in part and isinstance(getattr(r, "outcomes", None), str):
                cell.outcomes[int(r.seed)] = decode_outcomes(r.outcomes, int(r.n))
        verdict = best_row(cells, higher_is_better=m.higher_is_better, exact=m.exact, excluded=frozenset(undertrained))
        best[col] = {verdict.best} if verdict.best is not None else set()
    return best


def _row_labels(frame: pd.DataFrame, datasets: list[str]) -> pd.Series:
    return frame["model"] if len(datasets) == 1 else frame["model"] + " / " + frame["dataset"]


def _place_reported(table: Table, reported: list[dict[str, Any]], suite: type[Suite], datasets: list[str]) -> None:
    if not reported:
        return
    frame = records_frame([{**r, "suite": suite.name, "seed": pd.NA} for r in reported], suite)
    frame["row"] = _row_labels(frame[frame["dataset"].isin(datasets)], datasets)
    placed = []
    for rec, row in zip(reported, frame["row"]):
        col = _column_label(pd.Series({**{c: pd.NA for c in suite.sweep_columns}, **rec}), suite)
        if not pd.isna(row) and row in table.index and col in table.columns:
            placed.append((table.index.index(row), table.columns.index(col), rec))
    for i, j, rec in sorted(placed, key=lambda p: p[:2]):  # footnotes numbered in reading order
        if rec["footnote"] not in table.footnotes:
            table.footnotes.append(rec["footnote"])
        ref = table.footnotes.index(rec["footnote"]) + 1
        table.reported[(table.index[i], table.columns[j])] = ReportedCell(rec["value"], rec.get("std"), ref)


def _column_label(row: pd.Series, suite: type[Suite]) -> str:
    sweep = [f"{c}={_fmt_param(row[c])}" for c in suite.sweep_columns if pd.notna(row[c])]
    return row["metric"] + (f" ({', '.join(sweep)})" if sweep else "")


def _fmt_param(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def format_value(mean: float, std: float | None, unit: str) -> tuple[str, str | None]:
    """Mean and std as text with sensible digits: a positive std to two significant digits and the mean to
    the same decimal place; otherwise % to two decimals, large integers in full, anything else to 4 digits."""
    if std is not None and math.isfinite(std) and std > 0:
        decimals = min(6, max(0, 1 - math.floor(math.log10(std))))
        return f"{mean:.{decimals}f}", f"{std:.{decimals}f}"
    if float(mean).is_integer() and abs(mean) >= 1000:
        text = f"{int(mean):,}"
    elif unit == "%":
        text = f"{mean:.2f}"
    else:
        text = f"{mean:,.0f}" if abs(mean) >= 1e4 else f"{mean:.4g}"
    if std is None or not math.isfinite(std):
        return text, None
    decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
    return text, f"{0:.{decimals}f}"  # a zero spread, shown at the mean's precision


def _measured(table: Table, row: str, col: str, plus_minus: str, max_n: int) -> str:
    mean, std, n = table.mean.at[row, col], table.std.at[row, col], table.n.at[row, col]
    if pd.isna(mean):
        return "–"
    mean_text, std_text = format_value(float(mean), float(std) if n > 1 else None, table.units[col])
    text = mean_text + (f"{plus_minus}{std_text}" if std_text is not None else "")
    if (row, col) in table.interval:  # one seed: its 95 % Wilson interval over the images
        low, high, _ = table.interval[(row, col)]
        text += f" [{low:.1f}, {high:.1f}]"
    return text + (f" (n={int(n)})" if n < max_n else "")


def _published(cell: ReportedCell | None, plus_minus: str, ref: tuple[str, str]) -> str:
    """A published number as the paper printed it (no added digits), with its footnote mark."""
    if cell is None:
        return "–"
    value = f"{int(cell.value):,}" if float(cell.value).is_integer() else f"{cell.value:g}"
    spread = f"{plus_minus}{cell.std:g}" if cell.std is not None else ""
    return f"{value}{spread}{ref[0]}{cell.ref}{ref[1]}"


def _layout(table: Table) -> list[tuple[str, bool]]:
    """Output columns as (measured column, is_published); a published column follows its measured one."""
    out = []
    for col in table.columns:
        out.append((col, False))
        if col in table.reported_columns:
            out.append((col, True))
    return out


def _header(table: Table, unit: str) -> list[str]:
    return [f"{col}{' reported' if published else ''} {unit.format(table.units[col])}" for col, published in _layout(table)]


def _cells(table: Table, plus_minus: str, bold: tuple[str, str], ref: tuple[str, str]) -> list[list[str]]:
    max_n = int(table.n.max().max()) if table.n.notna().any().any() else 1
    out = []
    for row in table.index:
        cells = []
        for col, published in _layout(table):
            if published:
                cells.append(_published(table.reported.get((row, col)), plus_minus, ref))
                continue
            text = _measured(table, row, col, plus_minus, max_n)
            cells.append(f"{bold[0]}{text}{bold[1]}" if row in table.best.get(col, ()) else text)
        out.append(cells)
    return out


def _seeds_note(table: Table) -> str:
    ns = sorted({int(v) for v in table.n.to_numpy().ravel() if not pd.isna(v)})
    images = sorted({i for *_, i in table.interval.values()})
    note = "n = " + "/".join(str(n) for n in ns) + " seed(s); mean ± sample std where n > 1 ((n=k) marks cells with fewer seeds)"
    if images:
        note += f"; one seed: [95 % Wilson interval] over {'/'.join(str(i) for i in images)} test images"
    note += ("; bold: significantly better than the runner-up (paired McNemar on the same images, else Welch's t-test "
             "across seeds; p < 0.05), nothing bold where no model is")
    if table.undertrained:
        note += f"; undertrained (validation accuracy below the floor, never compared): {', '.join(sorted(table.undertrained))}"
    return note


def to_markdown(table: Table, notes: Sequence[str] = ()) -> str:
    """The Markdown table; the seeds note, numbered footnotes and the suite's `notes` (one bullet each) below it."""
    header = ["model", *_header(table, "[{}]")]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row, cells in zip(table.index, _cells(table, " ± ", ("**", "**"), (" [", "]"))):
        lines.append("| " + " | ".join([row, *cells]) + " |")
    below = [_seeds_note(table), *(f"[{i}] {text}" for i, text in enumerate(table.footnotes, 1)), *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n\n" + "\n\n".join(below) + "\n"


_TEX = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$", "×": r"$\times$", "–": "--"}


def _tex(s: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in s)


def to_latex(table: Table, notes: Sequence[str] = ()) -> str:
    """A booktabs tabular; published columns carry superscript footnote marks listed under the rule, then `notes`."""
    width = 1 + len(_layout(table))
    header = " & ".join(["model", *(_tex(h) for h in _header(table, "[{}]"))])
    body = [
        " & ".join([_tex(row), *(c.replace("–", "--") for c in cells)]) + r" \\"  # numbers and markup: no escaping
        for row, cells in zip(table.index, _cells(table, r"$\pm$", (r"\textbf{", "}"), ("$^{", "}$")))
    ]
    below = [rf"\noindent$^{{{i}}}$ {_tex(text)}\par" for i, text in enumerate(table.footnotes, 1)]
    below += [rf"\noindent {_tex(n)}\par" for n in notes]
    return "\n".join([
        r"% requires \usepackage{booktabs}; " + _seeds_note(table),
        rf"\begin{{tabular}}{{l{'r' * (width - 1)}}}", r"\toprule", header + r" \\", r"\midrule", *body, r"\bottomrule",
        r"\end{tabular}", *([r"\par\smallskip{\footnotesize", *below, "}"] if below else []), "",
    ])


def to_csv(table: Table) -> str:
    """Wide CSV: per measured column its mean, std and n, then the published value and std where any."""
    wide = pd.concat({"mean": table.mean, "std": table.std, "n": table.n}, axis=1).swaplevel(axis=1)
    wide = wide[[(c, s) for c in table.columns for s in ("mean", "std", "n")]]
    wide.columns = [f"{c} {s}" for c, s in wide.columns]
    for col in table.columns:
        if col in table.reported_columns:
            cells = [table.reported.get((row, col)) for row in table.index]
            wide[f"{col} reported"] = [c.value if c else None for c in cells]
            wide[f"{col} reported std"] = [c.std if c else None for c in cells]
            wide[f"{col} reported ref"] = [c.ref if c else None for c in cells]
    buf = io.StringIO()
    wide.rename_axis("model").to_csv(buf)
    return buf.getvalue()


def write_outputs(
    out_dir: Path,
    records: list[dict[str, Any]],
    suite: type[Suite],
    reported: list[dict[str, Any]] | None = None,
    *,
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """records.csv, table.md, table.tex, table.csv and the suite's plots under out_dir; returns paths by name.

    The tables show the suite's `table_metrics` (all metrics when None) with `notes` printed under them."""
    frame = records_frame(records, suite)
    shown = frame if suite.table_metrics is None else frame[frame["metric"].isin(suite.table_metrics)]
    table = comparison_table(shown, suite, reported)
    texts = {
        "records.csv": frame.to_csv(index=False),
        "table.md": to_markdown(table, notes),
        "table.tex": to_latex(table, notes),
        "table.csv": to_csv(table),
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = out_dir / name
        write_text(paths[name], text)
    for spec in suite.plots:
        for path in save_figure(sweep_figure(frame, spec), out_dir / spec.name):
            paths[path.name] = path
    return paths
