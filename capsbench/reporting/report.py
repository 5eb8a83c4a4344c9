"""`capsbench report`: per-suite tables and figures from every selected tracked run, published numbers beside
measured ones, and one report.md and standalone report.tex assembling them all."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from omegaconf import DictConfig, OmegaConf

from capsbench.errors import CapsbenchError
from capsbench.reporting import verdicts
from capsbench.reporting.baselines import load_baselines, matching
from capsbench.reporting.claim_files import CLAIMS_SUITE, load_claims
from capsbench.reporting.collect import (
    Invocation,
    Selection,
    check_comparable,
    combine,
    parse_when,
    protocol_params,
    readable_records,
    select,
)
from capsbench.reporting.document import Document, Figure, Run, Section, render_latex, render_markdown
from capsbench.reporting.figures import accuracy_vs_cost, save_figure
from capsbench.reporting.outputs import write_suite
from capsbench.suites import CATALOG, SUITES
from capsbench.tracking import read_invocations
from capsbench.util.atomic import write_text

log = logging.getLogger(__name__)


@dataclass
class Report:
    sections: list[Section]
    markdown: Path  # report.md
    latex: Path  # report.tex
    claims: list[verdicts.Judgement]


def selection(cfg: DictConfig) -> Selection:
    """The report's run filters from its config."""
    if cfg.suite is not None:
        SUITES.get(cfg.suite)  # an unknown name fails here with close matches
    return Selection(
        suite=cfg.suite, models=tuple(cfg.models) if cfg.models else None, dataset=cfg.dataset, budget=cfg.budget,
        version=cfg.version, code=cfg.code, since=parse_when(cfg.since, "since"), until=parse_when(cfg.until, "until"),
    )


def build_report(cfg: DictConfig) -> Report:
    """Read the selected finished runs, tabulate each suite, write everything under <output_dir>/report/."""
    sel = selection(cfg)
    found = read_invocations(cfg.tracking.uri, cfg.tracking.experiment)
    claims_runs = [inv for inv in found if inv.suite == CLAIMS_SUITE]
    if claims_runs:  # their units were planned per claim and judged by that command (<output_dir>/claims/)
        log.info("%d run(s) of suite=claims left out: each wrote its own claims table and report", len(claims_runs))
    found = [inv for inv in found if inv.suite != CLAIMS_SUITE]
    chosen = select(found, sel)
    if not chosen:
        have = ", ".join(sorted({f"{i.suite}/{i.budget}/{i.dataset}" for i in found})) or "none"
        raise CapsbenchError(
            f"no finished runs at {cfg.tracking.uri} match the filters (suite/budget/dataset found: {have}); "
            "loosen suite=, budget=, dataset=, models=, since= or until="
        )
    entries = load_baselines(Path(cfg.baselines_dir) if cfg.baselines_dir else None)
    root = Path(cfg.output_dir) / "report"
    frames, unreadable = {}, False
    for suite_name in sorted({inv.suite for inv in chosen}):
        if suite_name not in SUITES:
            log.warning("skipping suite %r: this capsbench does not define it", suite_name)
            continue
        records = readable_records(cfg.tracking.uri, [inv for inv in chosen if inv.suite == suite_name])
        invs = [inv for inv in chosen if inv.run_id in records]
        if not invs:
            log.warning("skipping suite %r: none of its runs has readable records", suite_name)
            unreadable = True
            continue
        check_comparable(invs, sel.models)
        frame = combine(invs, records, sel.models)
        frames[suite_name] = (invs, frame)
        check_narrow_eps(suite_name, frame, cfg.latex.eps)  # before anything is written
    if not frames and unreadable:
        raise CapsbenchError(
            f"none of the selected runs has readable records at {cfg.tracking.uri} (each is named in a warning "
            "above); rerun their commands, or narrow the selection to runs that have them"
        )
    sections = [_section(name, invs, frame, entries, root, cfg.latex.eps) for name, (invs, frame) in frames.items()]
    filters = ", ".join(
        f"{k}={cfg[k]}"
        for k in ("suite", "models", "dataset", "budget", "version", "code", "since", "until")
        if cfg[k] is not None
    )
    judged = verdicts.judge_all(
        load_claims(Path(cfg.baselines_dir) if cfg.baselines_dir else None),
        {s.suite: verdicts.Run(s.output.frame, s.model_args, s.settings, s.budget) for s in sections},
        cfg.one_seed_verdicts,
    )
    doc = Document(
        datetime.now(timezone.utc),
        f"{cfg.tracking.uri} (experiment {cfg.tracking.experiment})",
        filters,
        sections,
        _cost_figures(sections, root),
        judged,
    )
    paths = Report(sections, root / "report.md", root / "report.tex", judged)
    write_text(paths.markdown, render_markdown(doc, root))
    write_text(paths.latex, render_latex(doc, root))
    return paths


def _section(name: str, invs: list[Invocation], frame: pd.DataFrame, entries: list[Any], root: Path,
             narrow_eps: list[float] | None = None) -> Section:
    suite_cls = SUITES.get(name)
    records = frame.to_dict("records")
    model_args = {m: args for inv in invs for m, args in inv.model_args.items() if m in set(frame["model"])}
    reported = matching(entries, suite=name, model_args=model_args)
    notes = suite_cls().notes(records, suite_params(name, invs[0].params)) if records else []
    output = write_suite(root / name, records, suite_cls, reported, notes=notes,
                         narrow_eps=narrow_eps if "eps" in frame else None)
    first = invs[0]
    return Section(
        suite=name,
        description=suite_cls.description,
        output=output,
        budget=first.budget,
        version=first.version,
        datasets=sorted({inv.dataset for inv in invs}),
        runs=[Run(inv.run_id, inv.start, inv.params.get("seeds", "?")) for inv in invs],
        seeds={m: sorted(int(s) for s in part["seed"].unique()) for m, part in frame.groupby("model", sort=False)},
        settings=protocol_params(first),
        model_args=model_args,
    )


def check_narrow_eps(suite: str, frame: pd.DataFrame, narrow_eps: list[float] | None) -> None:
    """latex.eps names eps values the suite measured (a suite without eps columns ignores it)."""
    if not narrow_eps or "eps" not in frame:
        return
    measured = sorted({float(e) for e in frame["eps"].dropna()})
    if missing := [e for e in narrow_eps if not any(abs(e - m) < 1e-9 for m in measured)]:
        raise CapsbenchError(
            f"latex.eps={list(narrow_eps)}: {suite} measured no eps {', '.join(f'{e:g}' for e in missing)}; "
            f"choose among {', '.join(f'{m:g}' for m in measured)}"
        )


def suite_params(suite: str, params: dict[str, str]) -> Any:
    """The suite's params as the run used them: its Params defaults under the logged `params.*` values."""
    values = dataclasses.asdict(CATALOG.get(suite).params())
    cfg = OmegaConf.create(values)
    for key, text in params.items():
        if key.startswith("params."):
            OmegaConf.update(cfg, key.removeprefix("params."), yaml.safe_load(text), force_add=True)
    return cfg


def _cost_figures(sections: list[Section], root: Path) -> list[Figure]:
    """Accuracy against MACs where the accuracy and efficiency suites measured the same models (same arguments)."""
    by = {s.suite: s for s in sections}
    acc, eff = by.get("accuracy"), by.get("efficiency")
    if acc is None or eff is None or acc.budget != eff.budget:
        return []
    points = []
    for model in acc.seeds:
        if model not in eff.seeds or acc.model_args.get(model) != eff.model_args.get(model):
            log.info("accuracy vs MACs: %s left out (not measured by both suites with the same arguments)", model)
            continue
        macs = eff.output.frame.query("model == @model and metric == 'macs' and part == 'total'")["value"]
        rows = acc.output.frame.query("model == @model and metric == 'test_accuracy'")
        if macs.empty or rows.empty:
            continue
        mean = float(rows["value"].mean())
        if len(rows) > 1:
            low, high = mean - float(rows["value"].std()), mean + float(rows["value"].std())
        else:
            low, high = (
                (float(rows["ci_low"].iloc[0]), float(rows["ci_high"].iloc[0])) if "ci_low" in rows else (mean, mean)
            )
        points.append({"model": model, "cost": float(macs.mean()), "mean": mean, "low": low, "high": high})
    if not points:
        return []
    fig = accuracy_vs_cost(
        pd.DataFrame(points), xlabel="MACs per image (millions, log scale)", ylabel="test accuracy (%)"
    )
    save_figure(fig, root / "accuracy_vs_macs")
    return [
        Figure(
            root / "accuracy_vs_macs",
            f"Test accuracy against MACs per image ({acc.budget} budget); bars: "
            "95 % Wilson interval for one seed, ± std over several",
        )
    ]
