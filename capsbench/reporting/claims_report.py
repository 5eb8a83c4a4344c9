"""The files of `capsbench run suite=claims` under <output_dir>/claims/: the claims table (claims.md, with the verdict
rule, the claims whose data are absent and the verdicts counted; claims.tex; claims.csv) and one report (report.md and
a standalone report.tex) holding the tables of every section behind the verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from capsbench.reporting import verdicts
from capsbench.reporting.document import Document, Section, render_latex, render_markdown
from capsbench.util.atomic import write_text


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


def write_claims(root: Path, judged: list[verdicts.Judgement], lacking: dict[str, list[Any]],
                 sections: list[Section], run: ClaimsRun) -> dict[str, Path]:
    """Every file of the claims run under `root`, by name; `sections`: the measured sections' tables (written under
    `root` by the driver), for the report."""
    paths = {name: root / name for name in ("claims.md", "claims.tex", "claims.csv", "report.md", "report.tex")}
    write_text(paths["claims.md"], claims_markdown(judged, lacking, run))
    write_text(paths["claims.tex"], f"% capsbench claims (a list for any article)\n{verdicts.render_latex(judged)}\n")
    write_text(paths["claims.csv"], pd.DataFrame(verdicts.as_rows(judged)).to_csv(index=False))
    doc = Document(run.started, run.source, f"{run.command}; absent data: {_lacking_text(lacking)}", sections,
                   claims=judged)
    write_text(paths["report.md"], render_markdown(doc, root))
    write_text(paths["report.tex"], render_latex(doc, root))
    return paths


def claims_markdown(judged: list[verdicts.Judgement], lacking: dict[str, list[Any]], run: ClaimsRun) -> str:
    """claims.md: the command, the counts per verdict, the rule, the table, and the data each unplanned claim needs."""
    lines = [
        f"# Claims at budget={run.budget}",
        "",
        f"Command: `{run.command}` (capsbench {run.version}; training seeds {run.seeds}; {run.source}).",
        "",
        *(f"Verdicts{'' if heading is None else ' without a primary source'}: " + ", ".join(
            f"{n} {v}" for v, n in verdicts.verdict_counts(group).items() if n) + f" (of {len(group)} rows)."
          for heading, group in verdicts.grouped(judged)),
        "",
        verdicts.RULE,
        "",
        verdicts.render_markdown(judged),
    ]
    if lacking:
        lines += ["## Claims whose data files are absent (not planned)", ""]
        lines += [f"- `{cid}`: " + "; ".join(a.line() for a in absent) for cid, absent in lacking.items()]
    return "\n".join(lines).rstrip() + "\n"


def _lacking_text(lacking: dict[str, list[Any]]) -> str:
    return ", ".join(lacking) if lacking else "none"
