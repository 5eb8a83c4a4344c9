"""The files of `capsbench run suite=claims` under <output_dir>/claims/: the claims table (claims.md, with the verdict
rule, the claims whose data are absent and the verdicts counted; claims.tex; claims.csv) and one report (report.md and
a standalone report.tex) holding the tables of every suite config behind the verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from capsbench.reporting import verdicts
from capsbench.reporting.baselines import load_baselines, matching
from capsbench.reporting.document import Document, Run, Section, render_latex, render_markdown
from capsbench.reporting.outputs import write_suite
from capsbench.suites import SUITES
from capsbench.util.atomic import write_text


@dataclass
class Part:
    """One suite config of the claims run and what it measured: the tables of one report section."""

    label: str  # e.g. "accuracy-mnist-1": its folder and LaTeX labels
    suite: str
    dataset: str
    claims: list[str]  # ids of the claims it serves
    records: list[dict[str, Any]]
    settings: dict[str, str]  # train.*, data.*, params.* as logged
    model_args: dict[str, dict[str, str]]  # model -> constructor arguments as logged
    params: Any  # the suite's params as the units used them (for its notes under the tables)


@dataclass
class ClaimsRun:
    """Where the numbers come from: budget, capsbench version, seeds, the MLflow parent run, the command line."""

    budget: str
    version: str
    seeds: list[int]
    run_id: str | None
    source: str
    command: str
    started: datetime


def write_claims(root: Path, judged: list[verdicts.Judgement], lacking: dict[str, list[str]], parts: list[Part],
                 run: ClaimsRun) -> dict[str, Path]:
    """Every file of the claims run under `root`, by name."""
    paths = {name: root / name for name in ("claims.md", "claims.tex", "claims.csv", "report.md", "report.tex")}
    write_text(paths["claims.md"], claims_markdown(judged, lacking, run))
    write_text(paths["claims.tex"], f"% capsbench claims (a list for any article)\n{verdicts.render_latex(judged)}\n")
    write_text(paths["claims.csv"], pd.DataFrame(verdicts.as_rows(judged)).to_csv(index=False))
    sections = [_section(root, part, run) for part in parts if part.records]
    doc = Document(run.started, run.source, f"{run.command}; absent data: {_lacking_text(lacking)}", sections,
                   claims=judged)
    write_text(paths["report.md"], render_markdown(doc, root))
    write_text(paths["report.tex"], render_latex(doc, root))
    return paths


def claims_markdown(judged: list[verdicts.Judgement], lacking: dict[str, list[str]], run: ClaimsRun) -> str:
    """claims.md: the command, the counts per verdict, the rule, the table, and the data each unplanned claim needs."""
    counts = verdicts.verdict_counts(judged)
    lines = [
        f"# Claims at budget={run.budget}",
        "",
        f"Command: `{run.command}` (capsbench {run.version}; training seeds {run.seeds}; {run.source}).",
        "",
        "Verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" (of {len(judged)} claims).",
        "",
        verdicts.RULE,
        "",
        verdicts.render_markdown(judged),
    ]
    if lacking:
        lines += ["## Claims whose data files are absent (not planned)", ""]
        lines += [f"- `{cid}`: " + "; ".join(parts) for cid, parts in lacking.items()]
    return "\n".join(lines).rstrip() + "\n"


def _lacking_text(lacking: dict[str, list[str]]) -> str:
    return ", ".join(lacking) if lacking else "none"


def _section(root: Path, part: Part, run: ClaimsRun) -> Section:
    suite_cls = SUITES.get(part.suite)
    reported = matching(load_baselines(), suite=part.suite, model_args=part.model_args)
    output = write_suite(root / part.label, part.records, suite_cls, reported,
                         notes=suite_cls().notes(part.records, part.params))
    frame = output.frame
    return Section(
        suite=part.label,
        description=f"{suite_cls.description}; for the claims {', '.join(part.claims)}",
        output=output,
        budget=run.budget,
        version=run.version,
        datasets=[part.dataset],
        runs=[Run(run.run_id or "(tracking off)", run.started, str(run.seeds))],
        seeds={m: sorted(int(s) for s in g["seed"].unique()) for m, g in frame.groupby("model", sort=False)},
        settings=part.settings,
        model_args=part.model_args,
    )
