"""A suite's files from its records: records.csv, table.md, table.tex and table-narrow.tex (floats for one- and
two-column papers), one table-<name>.csv per table, and its figures as PNG and PDF, all in one directory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from capsbench.reporting import csv, latex, markdown
from capsbench.reporting.figures import save_figure, sweep_figure
from capsbench.reporting.frame import records_frame
from capsbench.reporting.model import Table
from capsbench.reporting.tables import build_tables
from capsbench.suites.layout import Layout, default_layout
from capsbench.util.atomic import write_text


@dataclass
class SuiteOutput:
    """What was written for one suite: its tables (headline first), its figures (stems) and every file by name."""

    tables: list[Table]
    figures: list[Path]
    paths: dict[str, Path]
    frame: pd.DataFrame


def suite_layout(suite: Any) -> Layout:
    """The suite's declared layout, or one table with a column per metric."""
    return suite.layout if getattr(suite, "layout", None) is not None else default_layout(suite.metrics)


def write_suite(out_dir: Path, records: list[dict[str, Any]], suite: Any, reported: list[dict[str, Any]] | None = None,
                *, notes: Sequence[str] = (), narrow_eps: Sequence[float] | None = None) -> SuiteOutput:
    """Build and write a suite's tables and figures under out_dir. table.tex holds table* floats (a one-column paper,
    or both columns of a two-column one); table-narrow.tex the same tables for one column of a two-column paper: one
    float per table, without each cell's interval, in parts only where a table cannot fit the column
    (latex.fits_column), with only the eps columns in `narrow_eps` when given."""
    frame = records_frame(records, suite)
    layout = suite_layout(suite)
    tables = build_tables(frame, suite, layout, reported, notes)
    narrow = build_tables(frame, suite, layout, reported, notes, fits=latex.fits_column, intervals=False,
                          sweep_values={"eps": tuple(narrow_eps)} if narrow_eps else None)
    texts = {
        "records.csv": frame.to_csv(index=False),
        "table.md": markdown.render_tables(tables) if tables else "No records to tabulate.\n",
        "table.tex": latex.render_tables(tables, suite.name),
        "table-narrow.tex": latex.render_tables(narrow, suite.name, layout="narrow"),
        **{f"table-{t.name}.csv": csv.render_table(t) for t in tables},
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = out_dir / name
        write_text(paths[name], text)
    figures = []
    for spec in layout.figures:
        fig = sweep_figure(frame, spec, suite)
        if fig is not None:
            figures.append(out_dir / spec.name)
            for path in save_figure(fig, out_dir / spec.name):
                paths[path.name] = path
    return SuiteOutput(tables, figures, paths, frame)
