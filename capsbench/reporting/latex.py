"""Tables as LaTeX: pandas' Styler writes the booktabs tabular from cells escaped here; a table float adds the
caption, label, group rules, block rules and the footnotes. Two layouts: `wide`, a table* float (a one-column paper's
text width, or both columns of a two-column paper; the report sets the same tables as table floats), and `narrow`, a
table float that fits one column of a two-column paper (ICML, CVPR, IEEE): cells without their intervals, one float
per table unless it cannot fit (fits_column). Floats go at the top of a page ([t]) unless the caller places them. Math
where the text means it ($\\ell_\\infty$, $\\varepsilon$), n in the headers on a line of its own, check flags as marks
on the model, and the suite's diagnostics outside the float. Needs only \\usepackage{booktabs}."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import replace

import pandas as pd

from capsbench.reporting.formatting import CellText, cell_text
from capsbench.reporting.model import Flags, Header, Measured, Table
from capsbench.reporting.tables import flags_note

PREAMBLE = r"\usepackage{booktabs}"
LAYOUTS = {"wide": "table*", "narrow": "table"}  # float environment per layout
COLUMN_PT = 229.5  # \\columnwidth of a two-column article at 10pt; ICML's 234.8, CVPR's 237.1 and IEEE's 252 are wider
FOOTNOTESIZE_PT, SCRIPTSIZE_PT = 8.0, 7.0  # the font sizes of a table's cells and of the lines under them (10pt class)
EM = {**dict.fromkeys("0123456789", 0.5), **dict.fromkeys(".,:;!'()[]|", 0.28), " ": 0.34, "-": 0.34, "–": 0.5,
      "%": 0.84, "=": 0.78, "±": 0.78, "/": 0.5}  # Computer Modern widths in em; uppercase 0.75, others 0.53
BOLD = 1.15  # bold digits are wider
MARGIN = 0.05  # narrow_width is within 5 % of what TeX sets (tests/test_latex.py measures it)
TABCOLSEP_PT = {"wide": 4.0, "narrow": 3.0}  # space either side of a column; the narrow tabular has none at its edges
NBSP = "\u00a0"  # no line break (textwrap does not break at it; tex() sets it as ~)
# the word, not part of an identifier such as monotone_in_eps (escaped: monotone\_\allowbreak{}in\_\allowbreak{}eps)
_MATH = ((re.compile(r"\bL-inf\b"), r"$\\ell_\\infty$"), (re.compile(r"(?<![\w}])eps\b"), r"$\\varepsilon$"))
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
    NBSP: "~",
}


_BREAK_AFTER = {"/": "/\\allowbreak{}", "_": "\\_\\allowbreak{}"}  # paths, URIs and identifiers may break in prose


_DOTTED = re.compile(r"(?<=[A-Za-z])\.(?=[A-Za-z])")  # the dot inside a dotted name (params.ensemble), not a number's


def tex(text: str) -> str:
    """Plain text as LaTeX that prints it: every special character escaped (OT1-safe: `>` is not `¿`); a line may
    break after `/`, `_` and a dotted name's dot, so a long path or identifier in a paragraph never overflows it."""
    escaped = "".join(_BREAK_AFTER.get(ch) or _TEX.get(ch, ch) for ch in str(text))
    return _DOTTED.sub(lambda _: ".\\allowbreak{}", escaped)


def math(text: str) -> str:
    """Escaped text with "L-inf" and the word "eps" set as math ($\\ell_\\infty$, $\\varepsilon$)."""
    for pattern, replacement in _MATH:
        text = pattern.sub(replacement, text)
    return text


def render_table(table: Table, label_prefix: str, *, layout: str = "wide", remarks: str = "comment",
                 env: str | None = None, placement: str = "t") -> str:
    """A table float (`env`, else LAYOUTS[layout], at `placement`): caption, label `tab:<label_prefix>-<name>`, the
    tabular, the notes a reader needs under it; the suite's remarks (which checks fired and why) follow the float, as
    `%` comments (remarks="comment": for pasting into a paper) or as a paragraph (remarks="text": the report)."""
    env = env or LAYOUTS[layout]
    table, marks = _marks(table)
    notes = [rf"{math(tex(n))}\par" for n in table.notes]
    notes += [rf"\textsuperscript{{{i}}}{tex(ref)}\par" for i, ref in enumerate(table.references, 1)]
    after = [f"% {line}" for r in table.remarks for line in textwrap.wrap(r, 116)]
    if remarks == "text" and table.remarks:
        after = [r"{\footnotesize\raggedright", *(rf"{math(tex(r))}\par" for r in table.remarks), "}"]
    return "\n".join(
        [
            rf"\begin{{{env}}}[{placement}]",
            r"\centering",
            rf"\caption{{{math(tex(table.title))}}}",
            rf"\label{{tab:{label_prefix}-{table.name}}}",
            rf"{{\footnotesize\setlength{{\tabcolsep}}{{{TABCOLSEP_PT[layout]:g}pt}}",
            tabular(table, marks, edges=layout == "wide").rstrip("\n") + r"\par}",
            r"\smallskip",
            r"{\scriptsize\raggedright",
            *notes,
            "}",
            rf"\end{{{env}}}",
            *after,
            "",
        ]
    )


def render_tables(tables: Sequence[Table], label_prefix: str, *, layout: str = "wide") -> str:
    """Every table of a suite as floats, with a comment naming the packages they need and the layout's venue."""
    venue = {"wide": "table* floats: a one-column paper, or both columns of a two-column paper (in a one-column paper "
                     "table* is table)",
             "narrow": "table floats for one column of a two-column paper (ICML, CVPR, IEEE)"}[layout]
    head = f"% capsbench tables ({label_prefix}); {venue}; needs {PREAMBLE}\n"
    return head + "\n".join(render_table(t, label_prefix, layout=layout) for t in tables)


def fits_column(table: Table) -> bool:
    """Whether the table, as the narrow layout sets it, fits one column of a two-column paper (COLUMN_PT). The LaTeX
    tests compile every layout and fail on any overfull box; this only chooses whether a table needs parts."""
    return narrow_width(table) <= COLUMN_PT * (1 - MARGIN)


def narrow_width(table: Table) -> float:
    """The width in pt of the table's narrow tabular: each column's widest line (labels, stacked header lines, values,
    the lines under them in a smaller font; a group header wider than its columns widens them) measured with Computer
    Modern's character widths, and the space between columns."""
    t, marks = _marks(table)
    counts = {h.key: _count(t, h) for h in t.headers}
    widths = []
    for level, name in enumerate(t.index_names):
        labels = [line for i in range(len(t.rows)) for line in _wrap(t.shown_labels(i)[level], 1)]
        mark = max((_pt(m, SCRIPTSIZE_PT) for m in marks.values()), default=0.0)
        widths.append(max(_pt(x) for x in [name, *labels]) + mark)
    for h in t.headers:
        lines = _header_lines(h, counts[h.key])
        cells = [cell_text(t.cells.get((i, h.key)), h.unit, t.max_seeds) for i in range(len(t.rows))]
        values = [_pt(c.main + ("00" if c.ref is not None else ""), bold=t.is_best(i, h.key)) for i, c in
                  enumerate(cells)]
        below = [_pt(_below(c, t.intervals).replace(r"\ensuremath{\pm}", "±"), SCRIPTSIZE_PT) for c in cells]
        widths.append(max([_pt(x) for x in lines] + values + below))
    sep = TABCOLSEP_PT["narrow"]
    total = sum(widths) + 2 * sep * (len(widths) - 1)
    start = len(t.index_names)
    for group, span in _runs([h.group for h in t.headers]):
        if group:
            lines = _group_lines(group, {counts[h.key] for h in t.headers if h.group == group}, span)
            inner = sum(widths[start:start + span]) + 2 * sep * (span - 1)
            total += max(0.0, max(_pt(x) for x in lines) - inner)
        start += span
    return total


def _pt(text: str, size: float = FOOTNOTESIZE_PT, *, bold: bool = False) -> float:
    """The width of plain text set in Computer Modern at `size` pt (an estimate within a few per cent)."""
    em = sum(EM.get(ch, 0.75 if ch.isupper() else 0.53) for ch in text)
    return em * size * (BOLD if bold else 1.0)


def _marks(table: Table) -> tuple[Table, dict[int, str]]:
    """The table without its flags column, the symbols of every row's fired checks as marks on its model, and the
    legend of the marks shown (in place of the column's legend) among its notes."""
    flags = [h for h in table.headers if h.kind == "flags"]
    if not flags:
        return table, {}
    marks: dict[int, str] = {}
    legend: dict[str, str] = {}
    for (row, key), cell in table.cells.items():
        if isinstance(cell, Flags) and cell.symbols:
            marks[row] = ",".join(cell.symbols)
            legend.update(zip(cell.symbols, cell.checks))
    keys = {h.key for h in flags}
    drop = {flags_note(h) for h in flags}
    notes = [n for n in table.notes if n not in drop]
    if legend:
        shown = "; ".join(f"{symbol} = {check}" for symbol, check in legend.items())
        notes.insert(0, f"Marks on a model: a masking check fired in some seed ({shown}); see the notes on the checks")
    kept = replace(table, headers=[h for h in table.headers if h.key not in keys], notes=notes,
                   cells={k: c for k, c in table.cells.items() if k[1] not in keys})
    return kept, marks


def tabular(table: Table, marks: dict[int, str] | None = None, *, edges: bool = True) -> str:
    """The booktabs tabular alone: label columns left aligned, numbers right aligned, flags centred; `marks` are set
    as superscripts on a row's model label; n (the items behind each one-seed value) is in the headers."""
    marks = marks or {}
    grouped = any(h.group for h in table.headers)
    counts = {h.key: _count(table, h) for h in table.headers}
    heads = _unique([*(tex(n) for n in table.index_names),
                     *(_header(h, counts[h.key]) for h in table.headers)])
    n_labels = len(table.index_names)
    if grouped:
        spans = dict(_runs([h.group for h in table.headers]))
        group_n = {g: {counts[h.key] for h in table.headers if h.group == g} for g in spans}
        tops = [""] * n_labels + [
            _stack(_group_lines(h.group, group_n[h.group], spans[h.group])) if h.group else "" for h in table.headers
        ]
        columns = pd.MultiIndex.from_tuples(list(zip(tops, heads)))
    else:
        columns = pd.Index(heads)
    model_level = table.index_names.index("model") if "model" in table.index_names else n_labels - 1
    rows = [
        [
            *(_label(x) + (rf"\textsuperscript{{{tex(marks[i])}}}" if level == model_level and i in marks and x else "")
              for level, x in enumerate(table.shown_labels(i))),
            *(_cell(table, i, h) for h in table.headers),
        ]
        for i in range(len(table.rows))
    ]
    fmt = "l" * n_labels + "".join("c" if h.kind == "flags" else "r" for h in table.headers)
    styler = pd.DataFrame(rows, columns=columns).style.hide(axis="index")
    fmt = fmt if edges else f"@{{}}{fmt}@{{}}"  # edges=False: no space outside the first and last columns
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


def _count(table: Table, h: Header) -> int | None:
    """The one n behind every one-seed value of the column (its Wilson intervals' n), None when there is none or
    several."""
    ns = {c.interval[2] for (_, k), c in table.cells.items() if k == h.key and isinstance(c, Measured) and c.interval}
    return ns.pop() if len(ns) == 1 else None


def _group_lines(group: str, counts: set[int | None], span: int) -> list[str]:
    """A group header in lines for `span` columns, with the n its columns share on a line of its own (never broken)."""
    (n,) = counts if len(counts) == 1 else (None,)
    return [*_wrap(group + ("," if n else ""), span), *([_n(n)] if n else [])]


def _header_lines(h: Header, n: int | None = None) -> list[str]:
    """Stacked header lines: label, detail, (unit), n; the unit and n of grouped columns are in the group header."""
    return [
        *_wrap(h.label, 1),
        *(_wrap(h.detail, 1) if h.detail else []),
        *([f"({h.unit})"] if h.unit and not h.group else []),
        *([_n(n)] if n and not h.group else []),
    ]


def _header(h: Header, n: int | None = None) -> str:
    return _stack(_header_lines(h, n))


def _n(n: int) -> str:
    """"n = 1,000" that no line breaks."""
    return f"n{NBSP}={NBSP}{n:,}"


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
        return math(tex(lines[0]))
    return r"\begin{tabular}[b]{@{}c@{}}" + r"\\".join(math(tex(line)) for line in lines) + r"\end{tabular}"


def _cell(table: Table, row: int, h: Header) -> str:
    t = cell_text(table.cells.get((row, h.key)), h.unit, table.max_seeds)
    main = tex(t.main) + (rf"\textsuperscript{{{t.ref}}}" if t.ref is not None else "")
    if table.is_best(row, h.key):
        main = rf"\textbf{{{main}}}"
    below = _below(t, table.intervals)
    if not below:
        return main
    return rf"\begin{{tabular}}[t]{{@{{}}r@{{}}}}{main}\\\scriptsize {below}\end{{tabular}}"


def _below(t: CellText, intervals: bool = True) -> str:
    """The line under a value: its spread over seeds, its 95 % interval (unless left out), and (n=k) fewer seeds."""
    parts = []
    if t.spread is not None:
        parts.append(rf"\ensuremath{{\pm}}{t.spread}")
    if t.interval is not None and intervals:
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
