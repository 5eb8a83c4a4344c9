"""Tables as LaTeX: pandas' Styler writes the booktabs tabular from cells escaped here; a table float adds the
caption, label, group rules, block rules and the footnotes. Needs only \\usepackage{booktabs}."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import pandas as pd

from capsbench.reporting.formatting import CellText, cell_text
from capsbench.reporting.model import Header, Table

PREAMBLE = r"\usepackage{booktabs}"
_TEX = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    ">": r"\textgreater{}",
    "<": r"\textless{}",
    "|": r"\textbar{}",
    '"': "''",
    "±": r"\ensuremath{\pm}",
    "×": r"\ensuremath{\times}",
    "–": "--",
    "—": "---",
    "−": r"\ensuremath{-}",
    "·": r"\ensuremath{\cdot}",
    "…": r"\dots{}",
    "≤": r"\ensuremath{\leq}",
    "≥": r"\ensuremath{\geq}",
    "≈": r"\ensuremath{\approx}",
    "†": r"\ensuremath{^{\dagger}}",
    "ε": r"\ensuremath{\varepsilon}",
    "°": r"\ensuremath{^{\circ}}",
    "µ": r"\ensuremath{\mu}",
    "²": r"\ensuremath{^{2}}",
}


_BREAK_AFTER = {"/": "/\\allowbreak{}", "_": "\\_\\allowbreak{}"}  # paths, URIs and identifiers may break in prose


def tex(text: str) -> str:
    """Plain text as LaTeX that prints it: every special character escaped (OT1-safe: `>` is not `¿`); a line may
    break after `/` and `_`, so a long path or identifier in a paragraph never overflows it."""
    return "".join(_BREAK_AFTER.get(ch) or _TEX.get(ch, ch) for ch in str(text))


def render_table(table: Table, label_prefix: str) -> str:
    """A table float: caption, label `tab:<label_prefix>-<name>`, the tabular, and the notes under it."""
    notes = [rf"{tex(n)}\par" for n in table.notes]
    notes += [rf"\textsuperscript{{{i}}}{tex(ref)}\par" for i, ref in enumerate(table.references, 1)]
    return "\n".join(
        [
            r"\begin{table}[htbp]",
            r"\centering",
            rf"\caption{{{tex(table.title)}}}",
            rf"\label{{tab:{label_prefix}-{table.name}}}",
            r"{\footnotesize\setlength{\tabcolsep}{4pt}",
            tabular(table).rstrip("\n") + r"\par}",
            r"\smallskip",
            r"{\scriptsize\raggedright",
            *notes,
            "}",
            r"\end{table}",
            "",
        ]
    )


def render_tables(tables: Sequence[Table], label_prefix: str) -> str:
    """Every table of a suite as floats, with a comment naming the packages they need."""
    head = f"% capsbench tables ({label_prefix}); needs {PREAMBLE}\n"
    return head + "\n".join(render_table(t, label_prefix) for t in tables)


def tabular(table: Table) -> str:
    """The booktabs tabular alone: label columns left aligned, numbers right aligned, flags centred."""
    grouped = any(h.group for h in table.headers)
    heads = _unique([*(tex(n) for n in table.index_names), *(_header(h, grouped) for h in table.headers)])
    n_labels = len(table.index_names)
    if grouped:
        spans = dict(_runs([h.group for h in table.headers]))
        tops = [""] * n_labels + [_stack(_wrap(h.group, spans[h.group])) if h.group else "" for h in table.headers]
        columns = pd.MultiIndex.from_tuples(list(zip(tops, heads)))
    else:
        columns = pd.Index(heads)
    rows = [
        [*(_label(x) for x in table.shown_labels(i)), *(_cell(table, i, h) for h in table.headers)]
        for i in range(len(table.rows))
    ]
    fmt = "l" * n_labels + "".join("c" if h.kind == "flags" else "r" for h in table.headers)
    styler = pd.DataFrame(rows, columns=columns).style.hide(axis="index")
    text = styler.to_latex(hrules=True, column_format=fmt, multicol_align="c")
    return _rules(text, table, n_labels)


def _rules(text: str, table: Table, n_labels: int) -> str:
    """Add \\cmidrule under each group header and \\midrule between blocks to Styler's output."""
    lines = text.splitlines()
    top = lines.index(r"\toprule")
    mid = lines.index(r"\midrule")
    body = lines[mid + 1 : mid + 1 + len(table.rows)]
    body = [(r"\midrule" + "\n" if table.block_start(i) else "") + line for i, line in enumerate(body)]
    head = lines[top + 1 : mid]
    if len(head) == 2:
        rules, start = [], n_labels + 1
        for group, span in _runs([h.group for h in table.headers]):
            if group:
                rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        head = [head[0], " ".join(rules), head[1]] if rules else head
    return "\n".join([*lines[: top + 1], *head, r"\midrule", *body, *lines[mid + 1 + len(table.rows) :]]) + "\n"


def _runs(groups: list[str]) -> list[tuple[str, int]]:
    runs: list[tuple[str, int]] = []
    for g in groups:
        if runs and runs[-1][0] == g:
            runs[-1] = (g, runs[-1][1] + 1)
        else:
            runs.append((g, 1))
    return runs


def _header(h: Header, grouped: bool) -> str:
    """Stacked header lines: label, detail, (unit); the unit of grouped columns is in the group header."""
    lines = [
        *_wrap(h.label, 1),
        *(_wrap(h.detail, 1) if h.detail else []),
        *([f"({h.unit})"] if h.unit and not h.group else []),
    ]
    return _stack(lines)


def _wrap(text: str, span: int) -> list[str]:
    """Header text in lines short enough for `span` numeric columns (about 9 characters each)."""
    return textwrap.wrap(text, width=max(10, 9 * span), break_long_words=False) or [""]


def _label(text: str) -> str:
    """A row label; one of several words (a block such as "PGD adaptive") stacked, top aligned with the value."""
    lines = _wrap(str(text), 1)
    if len(lines) == 1:
        return tex(lines[0])
    return r"\begin{tabular}[t]{@{}l@{}}" + r"\\".join(tex(line) for line in lines) + r"\end{tabular}"


def _stack(lines: list[str]) -> str:
    if len(lines) == 1:
        return tex(lines[0])
    return r"\begin{tabular}[b]{@{}c@{}}" + r"\\".join(tex(line) for line in lines) + r"\end{tabular}"


def _cell(table: Table, row: int, h: Header) -> str:
    t = cell_text(table.cells.get((row, h.key)), h.unit, table.max_seeds)
    main = tex(t.main) + (rf"\textsuperscript{{{t.ref}}}" if t.ref is not None else "")
    if table.is_best(row, h.key):
        main = rf"\textbf{{{main}}}"
    below = _below(t)
    if not below:
        return main
    return rf"\begin{{tabular}}[t]{{@{{}}r@{{}}}}{main}\\\scriptsize {below}\end{{tabular}}"


def _below(t: CellText) -> str:
    parts = []
    if t.spread is not None:
        parts.append(rf"\ensuremath{{\pm}}{t.spread}")
    if t.interval is not None:
        parts.append(f"{t.interval[0]}--{t.interval[1]}")
    if t.seeds is not None:
        parts.append(f"(n={t.seeds})")
    return " ".join(parts)


def _unique(names: list[str]) -> list[str]:
    """Equal header texts made distinct without changing what prints (Styler needs unique columns)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        out.append(name + "{}" * seen.get(name, 0))
        seen[name] = seen.get(name, 0) + 1
    return out
