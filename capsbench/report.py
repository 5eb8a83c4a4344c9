"""Tables from tidy records: mean ± std over seeds, best per column in bold by each metric's direction."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from capsbench.atomic import write_text
from capsbench.plots import save_figure, sweep_figure
from capsbench.suites import Suite

RECORD_COLUMNS = ["suite", "model", "dataset", "seed", "metric", "value"]


def records_frame(records: list[dict[str, Any]], suite: type[Suite]) -> pd.DataFrame:
    """Tidy records as a DataFrame with the fixed columns first, then the suite's sweep columns."""
    frame = pd.DataFrame.from_records(records)
    for col in [*RECORD_COLUMNS, *suite.sweep_columns]:
        if col not in frame:
            frame[col] = pd.NA
    return frame[[*RECORD_COLUMNS, *suite.sweep_columns]]


def aggregate(frame: pd.DataFrame, suite: type[Suite]) -> pd.DataFrame:
    """Mean, sample std (ddof=1; NaN for one seed) and n over seeds per (model, dataset, metric, sweep)."""
    keys = ["model", "dataset", "metric", *suite.sweep_columns]
    grouped = frame.groupby(keys, dropna=False, sort=False)["value"]
    return grouped.agg(mean="mean", std="std", n="count").reset_index()


@dataclass
class Table:
    """A comparison table: one row per model (and dataset), one column per metric and sweep value."""

    index: list[str]
    columns: list[str]
    mean: pd.DataFrame
    std: pd.DataFrame
    n: pd.DataFrame
    units: dict[str, str]
    best: dict[str, Any]  # column -> row label of the best mean


def comparison_table(agg: pd.DataFrame, suite: type[Suite]) -> Table:
    agg = agg.copy()
    agg["column"] = agg.apply(lambda r: _column_label(r, suite), axis=1)
    datasets = agg["dataset"].unique()
    agg["row"] = agg["model"] if len(datasets) == 1 else agg["model"] + " / " + agg["dataset"]
    rows = list(dict.fromkeys(agg["row"]))
    columns = list(dict.fromkeys(agg["column"]))
    pivot = {s: agg.pivot(index="row", columns="column", values=s).reindex(index=rows, columns=columns) for s in ("mean", "std", "n")}
    units = {c: suite.metric(m).unit for c, m in zip(agg["column"], agg["metric"])}
    best: dict[str, Any] = {}
    for col, metric in dict(zip(agg["column"], agg["metric"])).items():
        values = pivot["mean"][col].dropna()
        direction = suite.metric(metric).higher_is_better
        if len(values) > 1 and direction is not None:
            best[col] = values.idxmax() if direction else values.idxmin()
    return Table(rows, columns, pivot["mean"], pivot["std"], pivot["n"], units, best)


def _column_label(row: pd.Series, suite: type[Suite]) -> str:
    sweep = [f"{c}={_fmt_param(row[c])}" for c in suite.sweep_columns if pd.notna(row[c])]
    return row["metric"] + (f" ({', '.join(sweep)})" if sweep else "")


def _fmt_param(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _cell(mean: float, std: float, n: float, unit: str, plus_minus: str) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    fmt = "{:.2f}" if unit == "%" else "{:.4g}"
    text = fmt.format(mean)
    if n and n > 1 and not math.isnan(std):
        text += f"{plus_minus}{fmt.format(std)}"
    return text


def _cells(table: Table, plus_minus: str, bold: tuple[str, str]) -> list[list[str]]:
    out = []
    for row in table.index:
        cells = []
        for col in table.columns:
            text = _cell(table.mean.at[row, col], table.std.at[row, col], table.n.at[row, col], table.units[col], plus_minus)
            cells.append(f"{bold[0]}{text}{bold[1]}" if table.best.get(col) == row else text)
        out.append(cells)
    return out


def _seeds_note(table: Table) -> str:
    ns = sorted({int(v) for v in table.n.to_numpy().ravel() if not pd.isna(v)})
    return "n = " + "/".join(str(n) for n in ns) + " seed(s); mean ± sample std where n > 1; best per column in bold"


def to_markdown(table: Table) -> str:
    header = ["model", *[f"{c} [{table.units[c]}]" for c in table.columns]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(table.columns)) + "|"]
    for row, cells in zip(table.index, _cells(table, " ± ", ("**", "**"))):
        lines.append("| " + " | ".join([row, *cells]) + " |")
    return "\n".join(lines) + f"\n\n{_seeds_note(table)}\n"


def _tex(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        s = s.replace(a, b)
    return s


def to_latex(table: Table) -> str:
    cols = "l" + "r" * len(table.columns)
    header = " & ".join(["model", *[f"{_tex(c)} [{_tex(table.units[c])}]" for c in table.columns]])
    body = [
        " & ".join([_tex(row), *cells]) + r" \\"  # cells are numbers, $\pm$ and \textbf: no escaping
        for row, cells in zip(table.index, _cells(table, r"$\pm$", (r"\textbf{", "}")))
    ]
    return "\n".join([
        r"% requires \usepackage{booktabs}; " + _seeds_note(table),
        rf"\begin{{tabular}}{{{cols}}}", r"\toprule", header + r" \\", r"\midrule", *body, r"\bottomrule", r"\end{tabular}", "",
    ])


def to_csv(table: Table) -> str:
    wide = pd.concat({"mean": table.mean, "std": table.std, "n": table.n}, axis=1).swaplevel(axis=1)
    wide = wide[[(c, s) for c in table.columns for s in ("mean", "std", "n")]]
    wide.columns = [f"{c} {s}" for c, s in wide.columns]
    buf = io.StringIO()
    wide.rename_axis("model").to_csv(buf)
    return buf.getvalue()


def write_outputs(out_dir: Path, records: list[dict[str, Any]], suite: type[Suite]) -> dict[str, Path]:
    """records.csv, table.md, table.tex and table.csv under out_dir; returns their paths by name."""
    frame = records_frame(records, suite)
    table = comparison_table(aggregate(frame, suite), suite)
    texts = {
        "records.csv": frame.to_csv(index=False),
        "table.md": to_markdown(table),
        "table.tex": to_latex(table),
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
