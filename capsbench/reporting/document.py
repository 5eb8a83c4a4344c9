"""The assembled report: report.md and a standalone one-column report.tex with every suite's protocol, budget, runs,
seeds, tables (published numbers beside measured ones, with citations) and figures (captions with n, budget, attacks and
seeds), figures across suites, the claims when asked, the suites skipped with their reasons, and an appendix listing
only the settings that differ from each budget's defaults. In report.tex every float stays in its section (placeins)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from capsbench.reporting import latex, markdown, verdicts
from capsbench.reporting.latex import math, tex
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
    changed: dict[str, str] = field(default_factory=dict)  # the settings that differ from the budget's defaults
    values: list[dict[str, Any]] = field(default_factory=list)  # the first table's numbers per model, seed, sweep value


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
    skipped: dict[str, str] = field(default_factory=dict)  # suite -> why it is not reported


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
        f"Settings that differ from budget {s.budget}'s defaults: "
        + (", ".join(f"{k} = {v}" for k, v in s.changed.items()) if s.changed else "none") + ".",
    ]
    if s.budget != "paper":
        lines.append(
            f"Budget {s.budget} narrows the models and shortens training, so measured numbers are not expected "
            "to reach published ones; compare models within a column."
        )
    return lines


def figure_caption(s: Section, stem: Path) -> str:
    """What a suite's figure shows and of what: its name, the budget, the test items, the attacks and the seeds."""
    frame = s.output.frame
    what = stem.name.replace("_", " ").replace(" vs ", " against ")
    parts = [f"{s.suite}: {what}", f"budget {s.budget}"]
    ns = sorted({int(float(v)) for v in frame["n"].dropna()}) if "n" in frame else []
    if ns:
        parts.append("n = " + "/".join(f"{v:,}" for v in ns) + " test items")
    if "attack" in frame:
        measured = frame[frame["n"].notna()] if "n" in frame else frame  # counts of images, not a phase's timing
        attacks = [str(a) for a in measured["attack"].dropna().unique() if a not in ("worst_case",)]
        parts.append("attacks " + ", ".join(attacks) + (" (worst case: per image, over all of them)"
                                                        if "worst_case" in set(frame["attack"]) else ""))
    seeds = sorted({v for v in s.seeds.values() for v in v})
    parts.append(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
    band = "95 % Wilson interval" if len(seeds) == 1 else "± std over seeds (one seed: 95 % Wilson interval)"
    return "; ".join(parts) + f". Bands: {band}."


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
    out += [f"- Not reported: {reason}" for reason in doc.skipped.values()] + ([""] if doc.skipped else [])
    for s in doc.sections:
        out += [f"## {s.suite}", "", f"{s.description}.", ""]
        out += [f"- {line}" for line in _protocol_lines(s)]
        out += [f"- Run `{r.run_id}` started {r.start:%Y-%m-%d %H:%M} UTC, seeds {r.seeds}" for r in s.runs]
        out += ["", markdown.render_tables(s.output.tables) if s.output.tables else "No records to tabulate.\n"]
        out += [f"![{stem.name}]({_rel(stem.with_suffix('.png'), root)})\n\n{figure_caption(s, stem)}\n"
                for stem in s.output.figures]
        out += ["Files: " + " · ".join(f"[{name}]({_rel(path, root)})" for name, path in s.output.paths.items()), ""]
    if doc.claims:
        out += ["## Claims", "", verdicts.RULE, "", verdicts.render_markdown(doc.claims), ""]
    if doc.figures:
        out += ["## Across suites", ""]
        out += [f"![{f.stem.name}]({_rel(f.stem.with_suffix('.png'), root)})\n\n{f.caption}\n" for f in doc.figures]
    return "\n".join(out).rstrip() + "\n"


def render_latex(doc: Document, root: Path) -> str:
    """report.tex: a standalone one-column article (booktabs, graphicx, placeins) whose floats stay in their sections,
    including the figures' PDFs relative to `root`; the settings that differ from each budget's defaults in an
    appendix."""
    out = [
        r"\documentclass{article}",
        r"\usepackage[margin=1in]{geometry}",
        r"\usepackage{booktabs}",
        r"\usepackage{graphicx}",
        r"\usepackage[section]{placeins}",  # a float never leaves its section, nor rises above its heading
        r"\title{capsbench report}",
        rf"\date{{{doc.generated:%Y-%m-%d %H:%M} UTC}}",
        r"\author{}",
        r"\begin{document}",
        r"\maketitle",
        # ragged: the store's path may be long, and a justified line cannot stretch around it
        r"{\raggedright "
        + tex(f"Runs read from {doc.source}; filters: {doc.filters or 'none'}. {PUBLISHED_NOTE}")
        + r"\par}",
        *(r"{\raggedright " + tex(f"Not reported: {reason}") + r"\par}" for reason in doc.skipped.values()),
        "",
    ]
    for s in doc.sections:
        out += [rf"\section{{{tex(s.suite)}}}", rf"\label{{sec:{s.suite}}}", tex(f"{s.description}."), "",
                r"{\small\raggedright"]
        out += [tex(line) + r"\par" for line in _protocol_lines(s)[:2]]
        out += [tex(f"Run {r.run_id} started {r.start:%Y-%m-%d %H:%M} UTC, seeds {r.seeds}.") + r"\par" for r in s.runs]
        out.append((tex(f"Settings that differ from budget {s.budget}'s defaults: ") + r"appendix~\ref{app:settings}."
                    if s.changed else tex(f"Settings: budget {s.budget}'s defaults.")) + r"\par")
        out += [tex(line) + r"\par" for line in _protocol_lines(s)[3:]]
        out += ["}", ""]
        out += [latex.render_table(t, s.suite, remarks="text", env="table", placement="!htbp") for t in s.output.tables]
        out += [_figure(stem, root, figure_caption(s, stem)) for stem in s.output.figures]
    if doc.claims:
        out += [r"\section{Claims}", tex(verdicts.RULE), "", verdicts.render_latex(doc.claims), ""]
    if doc.figures:
        out += [r"\section{Across suites}", *(_figure(f.stem, root, f.caption) for f in doc.figures)]
    out += _appendix(doc)
    return "\n".join([*out, r"\end{document}", ""])


def _appendix(doc: Document) -> list[str]:
    """The settings of each suite's runs that differ from its budget's defaults (none listed: the defaults)."""
    if not any(s.changed for s in doc.sections):
        return []
    out = [r"\appendix", r"\section{Settings}", r"\label{app:settings}",
           tex("Each suite's settings that differ from its budget's defaults (capsbench show-config suite=... "
               "budget=... prints them all)."), "", r"{\small\raggedright"]
    for s in doc.sections:
        if s.changed:
            out.append(rf"\textbf{{{tex(s.suite)}}} (budget {tex(s.budget)}): "
                       + tex(", ".join(f"{k} = {v}" for k, v in s.changed.items())) + r".\par")
    return [*out, "}", ""]


def _figure(stem: Path, root: Path, caption: str) -> str:
    path = _rel(stem.with_suffix(".pdf"), root)
    return "\n".join(
        [
            r"\begin{figure}[!htbp]",
            r"\centering",
            rf"\includegraphics[width=3.3in]{{{path}}}",
            rf"\caption{{{math(tex(caption))}}}",
            r"\end{figure}",
            "",
        ]
    )


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()
