"""Tables as GitHub Markdown: a bold caption, one header row, numbers right aligned, the best cell in bold, and
the footnotes as a list under the table."""

from __future__ import annotations

from collections.abc import Sequence

from capsbench.reporting.formatting import CellText, cell_text, header_text
from capsbench.reporting.model import Header, Table


def render_table(table: Table) -> str:
    """One table with its caption and footnotes. Markdown has no spanning headers: under one group the columns
    are headed `eps=0.1` and the caption names the group; under several, each header repeats its group."""
    several = len({h.group for h in table.headers if h.over}) > 1
    header = [*table.index_names, *(_header(h, several) for h in table.headers)]
    align = ["---"] * len(table.index_names) + [":---:" if h.kind == "flags" else "---:" for h in table.headers]
    lines = [_row(header), "|" + "|".join(align) + "|"]
    for i in range(len(table.rows)):
        cells = []
        for h in table.headers:
            text = _cell(cell_text(table.cells.get((i, h.key)), h.unit, table.max_seeds))
            cells.append(f"**{text}**" if table.is_best(i, h.key) else text)
        lines.append(_row([*table.shown_labels(i), *cells]))
    notes = [*table.notes, *table.remarks]
    below = [*(f"- {note}" for note in notes), *(f"- [{i}] {ref}" for i, ref in enumerate(table.references, 1))]
    return "\n".join([_caption(table), "", *lines, "", *below]) + "\n"


def render_tables(tables: Sequence[Table]) -> str:
    """Every table of a suite, headline first, separated by blank lines."""
    return "\n".join(render_table(t) for t in tables)


def _caption(table: Table) -> str:
    groups = dict.fromkeys((h.over, h.group) for h in table.headers if h.over)
    extra = "".join(f"; {over}=… columns: {group}" for over, group in groups) if len(groups) == 1 else ""
    return f"**{_escape(table.title)}**{_escape(extra)}"


def _header(h: Header, several: bool) -> str:
    if h.kind == "flags":
        return h.label  # its detail is the legend, a note under the table
    if h.over and several:
        return f"{h.group}={h.label}" if h.group.endswith(f" {h.over}") else f"{h.group}: {h.label}"
    if h.over:
        return f"{h.over}={h.label}"
    return header_text(h.label, h.unit, h.detail)


def _cell(t: CellText) -> str:
    text = t.main
    if t.spread is not None:
        text += f" ± {t.spread}"
    if t.interval is not None:
        text += f" [{t.interval[0]}, {t.interval[1]}]"
    if t.ref is not None:
        text += f" [{t.ref}]"
    if t.seeds is not None:
        text += f" (n={t.seeds})"
    return text


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(_escape(c) for c in cells) + " |"


def _escape(text: str) -> str:
    return text.replace("|", r"\|")
