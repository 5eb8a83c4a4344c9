"""`capsbench report`: per-suite tables and plots from every selected tracked run, published numbers beside
measured ones, and one summary.md linking them all."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig

from capsbench.atomic import write_text
from capsbench.baselines import load_baselines, matching
from capsbench.collect import Invocation, Selection, check_comparable, combine, parse_when, select
from capsbench.errors import CapsbenchError
from capsbench.report import write_outputs
from capsbench.suites import SUITES
from capsbench.tracking import read_invocations, read_records

log = logging.getLogger(__name__)


@dataclass
class SuiteReport:
    suite: str
    invocations: list[Invocation]
    seeds: dict[str, list[int]]  # model -> seeds in the table
    paths: dict[str, Path]
    markdown: str


@dataclass
class Report:
    suites: list[SuiteReport]
    summary: Path


def selection(cfg: DictConfig) -> Selection:
    if cfg.suite is not None:
        SUITES.get(cfg.suite)  # an unknown name fails here with close matches
    return Selection(
        suite=cfg.suite, models=tuple(cfg.models) if cfg.models else None, dataset=cfg.dataset, budget=cfg.budget,
        version=cfg.version, since=parse_when(cfg.since, "since"), until=parse_when(cfg.until, "until"),
    )


def build_report(cfg: DictConfig) -> Report:
    """Read the selected finished runs, tabulate each suite, write everything under <output_dir>/report/."""
    sel = selection(cfg)
    found = read_invocations(cfg.tracking.uri, cfg.tracking.experiment)
    chosen = select(found, sel)
    if not chosen:
        have = ", ".join(sorted({f"{i.suite}/{i.budget}/{i.dataset}" for i in found})) or "none"
        raise CapsbenchError(f"no finished runs at {cfg.tracking.uri} match the filters (suite/budget/dataset found: {have}); "
                             "loosen suite=, budget=, dataset=, models=, since= or until=")
    entries = load_baselines(Path(cfg.baselines_dir) if cfg.baselines_dir else None)
    out_root = Path(cfg.output_dir) / "report"
    reports = []
    for suite_name in sorted({inv.suite for inv in chosen}):
        if suite_name not in SUITES:
            log.warning("skipping suite %r: this capsbench does not define it", suite_name)
            continue
        invs = [inv for inv in chosen if inv.suite == suite_name]
        check_comparable(invs, sel.models)
        frame = combine(invs, {inv.run_id: read_records(cfg.tracking.uri, inv.run_id) for inv in invs}, sel.models)
        model_args = {m: args for inv in invs for m, args in inv.model_args.items()}
        reported = matching(entries, suite=suite_name, model_args=model_args)
        suite_cls = SUITES.get(suite_name)
        paths = write_outputs(out_root / suite_name, frame.to_dict("records"), suite_cls, reported)
        seeds = {m: sorted(int(s) for s in part["seed"].unique()) for m, part in frame.groupby("model", sort=False)}
        reports.append(SuiteReport(suite_name, invs, seeds, paths, paths["table.md"].read_text()))
    summary = out_root / "summary.md"
    write_text(summary, summary_markdown(reports, cfg, out_root))
    return Report(reports, summary)


def summary_markdown(reports: list[SuiteReport], cfg: DictConfig, root: Path) -> str:
    """One page linking every table and plot, with the runs and seeds behind each table."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    filters = ", ".join(f"{k}={cfg[k]}" for k in ("suite", "models", "dataset", "budget", "version", "since", "until") if cfg[k] is not None)
    lines = [
        "# capsbench report", "",
        f"Generated {now} from `{cfg.tracking.uri}` (experiment `{cfg.tracking.experiment}`); filters: {filters or 'none'}.",
        "Each cell is the mean ± sample std over seeds; a *reported* column is the number the cited paper gives "
        "under its own protocol (full-size models and schedules), placed beside the measured one for reference.", "",
    ]
    for rep in reports:
        first = rep.invocations[0]
        suite = SUITES.get(rep.suite)
        lines += [f"## {rep.suite}", "", f"{suite.description}.", "",
                  f"Budget `{first.budget}`, capsbench {first.version}, dataset `{first.dataset}`, "
                  f"{len(rep.invocations)} invocation(s):", ""]
        lines += [f"- `{inv.run_id}` started {inv.start:%Y-%m-%d %H:%M} UTC, seeds {inv.params.get('seeds', '?')}" for inv in rep.invocations]
        lines += ["", "Seeds in the table: " + "; ".join(f"{m} {s}" for m, s in rep.seeds.items()) + ".", ""]
        if first.budget != "paper":
            lines += [f"Budget `{first.budget}` narrows the models and shortens training, so measured numbers are not "
                      "expected to reach the reported ones; compare models within a column.", ""]
        lines += [rep.markdown, "Files: " + " · ".join(f"[{name}]({_rel(path, root)})" for name, path in rep.paths.items()), ""]
        lines += [f"![{path.stem}]({_rel(path, root)})" for name, path in rep.paths.items() if name.endswith(".png")]
    return "\n".join(lines).rstrip() + "\n"


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()
