"""Tables as LaTeX: pandas' Styler writes the booktabs tabular from cells escaped here; a table float adds the
caption, label, group rules, block rules and the footnotes. Two layouts: `wide`, a table* float (a one-column paper's
text width, or both columns of a two-column paper), and `narrow`, a table float that fits one column of a two-column
paper (ICML, CVPR, IEEE). Math where the text means it ($\\ell_\\infty$, $\\varepsilon$), n in the headers, check
flags as marks on the model, and the suite's diagnostics outside the float. Needs only \\usepackage{booktabs}."""

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
NARROW_COLUMNS = 4  # value columns per table in one column of a two-column paper (longer tables are split in parts)
COLUMN_PT = 229.5  # \\columnwidth of a two-column article at 10pt; ICML's 234.8, CVPR's 237.1 and IEEE's 252 are wider
CHAR_PT = 4.4  # an estimate of a \\footnotesize character's width, bold digits included (regular digits: 4.0pt)
TABCOLSEP_PT = 4.0
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
}


_BREAK_AFTER = {"/": "/\\allowbreak{}", "_": "\\_\\allowbreak{}"}  # paths, URIs and identifiers may break in prose


def tex(text: str) -> str:
    """Plain text as LaTeX that prints it: every special character escaped (OT1-safe: `>` is not `¿`); a line may
    break after `/` and `_`, so a long path or identifier in a paragraph never overflows it."""
    return "".join(_BREAK_AFTER.get(ch) or _TEX.get(ch, ch) for ch in str(text))


def math(text: str) -> str:
    """Escaped text with "L-inf" and the word "eps" set as math ($\\ell_\\infty$, $\\varepsilon$)."""
    for pattern, replacement in _MATH:
        text = pattern.sub(replacement, text)
    return text


def render_table(table: Table, label_prefix: str, *, layout: str = "wide", remarks: str = "comment") -> str:
    """A table float (LAYOUTS[layout]): caption, label `tab:<label_prefix>-<name>`, the tabular, the notes a reader
    needs under it; the suite's remarks (which checks fired and why) follow the float, as `%` comments
    (remarks="comment": for pasting into a paper) or as a paragraph (remarks="text": the report)."""
    env = LAYOUTS[layout]
    table, marks = _marks(table)
    notes = [rf"{math(tex(n))}\par" for n in table.notes]
    notes += [rf"\textsuperscript{{{i}}}{tex(ref)}\par" for i, ref in enumerate(table.references, 1)]
    after = [f"% {line}" for r in table.remarks for line in textwrap.wrap(r, 116)]
    if remarks == "text" and table.remarks:
        after = [r"{\footnotesize\raggedright", *(rf"{math(tex(r))}\par" for r in table.remarks), "}"]
    return "\n".join(
        [
            rf"\begin{{{env}}}[tbp]",
            r"\centering",
            rf"\caption{{{math(tex(table.title))}}}",
            rf"\label{{tab:{label_prefix}-{table.name}}}",
            r"{\footnotesize\setlength{\tabcolsep}{4pt}",
            tabular(table, marks).rstrip("\n") + r"\par}",
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
    venue = {"wide": "table* floats: a one-column paper, or both columns of a two-column paper",
             "narrow": "table floats for one column of a two-column paper (ICML, CVPR, IEEE)"}[layout]
    head = f"% capsbench tables ({label_prefix}); {venue}; needs {PREAMBLE}\n"
    return head + "\n".join(render_table(t, label_prefix, layout=layout) for t in tables)


def fits_column(table: Table) -> bool:
    """Whether the table, as tabular() sets it, should fit one column of a two-column paper (COLUMN_PT): its
    columns' widest lines (labels, stacked header lines, values, and intervals in a smaller font) estimated at
    CHAR_PT a character. The LaTeX tests compile every layout and count overfull boxes; this only chooses the parts."""
    t, marks = _marks(table)
    counts = {h.key: _count(t, h) for h in t.headers}
    widths = []
    for level, name in enumerate(t.index_names):
        labels = [line for i in range(len(t.rows)) for line in _wrap(t.shown_labels(i)[level], 1)]
        widths.append(max(len(x) for x in [name, *labels]) + max((len(m) for m in marks.values()), default=0) * 0.7)
    for h in t.headers:
        lines = [*_wrap(h.label, 1), *(_wrap(h.detail, 1) if h.detail else []), f"({h.unit})" if h.unit else ""]
        lines += [f"n = {counts[h.key]:,}"] if counts[h.key] and not h.group else []
        cells = [cell_text(t.cells.get((i, h.key)), h.unit, t.max_seeds) for i in range(len(t.rows))]
        values = [len(c.main) + (2 if c.ref is not None else 0) for c in cells]
        below = [0.8 * len(_below(c)) for c in cells]
        widths.append(max([len(x) for x in lines] + values + below))
    return sum(widths) * CHAR_PT + 2 * TABCOLSEP_PT * len(widths) <= COLUMN_PT


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


def tabular(table: Table, marks: dict[int, str] | None = None) -> str:
    """The booktabs tabular alone: label columns left aligned, numbers right aligned, flags centred; `marks` are set
    as superscripts on a row's model label; n (the items behind each one-seed value) is in the headers."""
    marks = marks or {}
    grouped = any(h.group for h in table.headers)
    counts = {h.key: _count(table, h) for h in table.headers}
    heads = _unique([*(tex(n) for n in table.index_names),
                     *(_header(h, grouped, counts[h.key]) for h in table.headers)])
    n_labels = len(table.index_names)
    if grouped:
        spans = dict(_runs([h.group for h in table.headers]))
        group_n = {g: {counts[h.key] for h in table.headers if h.group == g} for g in spans}
        tops = [""] * n_labels + [
            _stack(_wrap(_group_text(h.group, group_n[h.group]), spans[h.group])) if h.group else ""
            for h in table.headers
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


def _group_text(group: str, counts: set[int | None]) -> str:
    """A group header, with the n of its columns when they share one."""
    (n,) = counts if len(counts) == 1 else (None,)
    return group + (f", n = {n:,}" if n else "")


def _header(h: Header, grouped: bool, n: int | None = None) -> str:
    """Stacked header lines: label, detail, (unit), n; the unit and n of grouped columns are in the group header."""
    lines = [
        *_wrap(h.label, 1),
        *(_wrap(h.detail, 1) if h.detail else []),
        *([f"({h.unit})"] if h.unit and not h.group else []),
        *([f"n = {n:,}"] if n and not h.group else []),
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
        return math(tex(lines[0]))
    return r"\begin{tabular}[b]{@{}c@{}}" + r"\\".join(math(tex(line)) for line in lines) + r"\end{tabular}"


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
