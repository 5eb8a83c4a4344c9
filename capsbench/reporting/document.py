"""The assembled report: report.md and a standalone report.tex with every suite's protocol, budget, runs, seeds,
tables (published numbers beside measured ones, with citations) and figures, plus figures across suites."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from capsbench.reporting import latex, markdown, verdicts
from capsbench.reporting.latex import tex
from capsbench.reporting.outputs import SuiteOutput

PUBLISHED_NOTE = ("A published column holds the number the cited paper reports under its own protocol (full-size "
                  "models and schedules), placed beside the measured one for reference; bold compares measured "
                  "numbers only.")


@dataclass
class Run:
    """One tracked invocation behind a section."""

    run_id: str
    start: datetime
    seeds: str


@dataclass
class Section:
    """One suite in the report: where its numbers come from and what was written for it."""

    suite: str
    description: str
    output: SuiteOutput
    budget: str
    version: str
    datasets: list[str]
    runs: list[Run]
    seeds: dict[str, list[int]]  # model -> seeds in the tables
    settings: dict[str, str]  # the measuring config (train.*, data.*, params.*, ...) as logged
    model_args: dict[str, dict[str, str]]  # model -> constructor arguments as logged


@dataclass
class Figure:
    """A figure across suites: file stem under the report root and its caption."""

    stem: Path
    caption: str


@dataclass
class Document:
    generated: datetime
    source: str  # where the runs were read from
    filters: str
    sections: list[Section]
    figures: list[Figure] = field(default_factory=list)
    claims: list[verdicts.Judgement] = field(default_factory=list)


def _images(section: Section) -> str:
    frame = section.output.frame
    if "n" not in frame:
        return ""
    ns = sorted({int(float(v)) for v in frame["n"].dropna()})
    return f"; n = {', '.join(f'{v:,}' for v in ns)} test items per accuracy" if ns else ""


def _protocol_lines(s: Section) -> list[str]:
    seeds = "; ".join(f"{m} {v}" for m, v in s.seeds.items())
    lines = [
        f"Budget {s.budget}, capsbench {s.version}, dataset {', '.join(s.datasets)}{_images(s)}.",
        f"Seeds: {seeds}.",
        "Settings: " + ", ".join(f"{k} = {v}" for k, v in sorted(s.settings.items())) + ".",
        *(
            f"Model {m}: " + ", ".join(f"{k} = {v}" for k, v in sorted(a.items())) + "."
            for m, a in s.model_args.items()
        ),
    ]
    if s.budget != "paper":
        lines.append(
            f"Budget {s.budget} narrows the models and shortens training, so measured numbers are not expected "
            "to reach published ones; compare models within a column."
        )
    return lines


def render_markdown(doc: Document, root: Path) -> str:
    """report.md: links and images relative to `root` (the directory it is written to)."""
    out = [
        "# capsbench report",
        "",
        f"Generated {doc.generated:%Y-%m-%d %H:%M} UTC from `{doc.source}`; filters: {doc.filters or 'none'}.",
        "",
        PUBLISHED_NOTE,
        "",
    ]
    for s in doc.sections:
        out += [f"## {s.suite}", "", f"{s.description}.", ""]
        out += [f"- {line}" for line in _protocol_lines(s)]
        out += [f"- Run `{r.run_id}` started {r.start:%Y-%m-%d %H:%M} UTC, seeds {r.seeds}" for r in s.runs]
        out += ["", markdown.render_tables(s.output.tables) if s.output.tables else "No records to tabulate.\n"]
        out += [f"![{stem.name}]({_rel(stem.with_suffix('.png'), root)})\n" for stem in s.output.figures]
        out += ["Files: " + " · ".join(f"[{name}]({_rel(path, root)})" for name, path in s.output.paths.items()), ""]
    if doc.claims:
        out += ["## Claims", "", verdicts.RULE, "", verdicts.render_markdown(doc.claims), ""]
    if doc.figures:
        out += ["## Across suites", ""]
        out += [f"![{f.stem.name}]({_rel(f.stem.with_suffix('.png'), root)})\n\n{f.caption}\n" for f in doc.figures]
    return "\n".join(out).rstrip() + "\n"


def render_latex(doc: Document, root: Path) -> str:
    """report.tex: a standalone article (booktabs, graphicx) that includes the figures' PDFs relative to `root`."""
    out = [
        r"\documentclass{article}",
        r"\usepackage{booktabs}",
        r"\usepackage{graphicx}",
        r"\title{capsbench report}",
        rf"\date{{{doc.generated:%Y-%m-%d %H:%M} UTC}}",
        r"\author{}",
        r"\begin{document}",
        r"\maketitle",
        # ragged: the store's path may be long, and a justified line cannot stretch around it
        r"{\raggedright "
        + tex(f"Runs read from {doc.source}; filters: {doc.filters or 'none'}. {PUBLISHED_NOTE}")
        + r"\par}",
        "",
    ]
    for s in doc.sections:
        out += [rf"\section{{{tex(s.suite)}}}", tex(f"{s.description}."), "", r"{\small\raggedright"]
        out += [tex(line) + r"\par" for line in _protocol_lines(s)]
        out += [tex(f"Run {r.run_id} started {r.start:%Y-%m-%d %H:%M} UTC, seeds {r.seeds}.") + r"\par" for r in s.runs]
        out += ["}", ""]
        out += [latex.render_table(t, s.suite, remarks="text") for t in s.output.tables]
        out += [_figure(stem, root, f"{s.suite}: {stem.name.replace('_', ' ')}") for stem in s.output.figures]
        out += [r"\clearpage", ""]
    if doc.claims:
        out += [r"\section{Claims}", tex(verdicts.RULE), "", verdicts.render_latex(doc.claims), r"\clearpage", ""]
    if doc.figures:
        out += [r"\section{Across suites}", *(_figure(f.stem, root, f.caption) for f in doc.figures)]
    return "\n".join([*out, r"\end{document}", ""])


def _figure(stem: Path, root: Path, caption: str) -> str:
    path = _rel(stem.with_suffix(".pdf"), root)
    return "\n".join(
        [
            r"\begin{figure}[htbp]",
            r"\centering",
            rf"\includegraphics[width=3.3in]{{{path}}}",
            rf"\caption{{{tex(caption)}}}",
            r"\end{figure}",
            "",
        ]
    )


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()
