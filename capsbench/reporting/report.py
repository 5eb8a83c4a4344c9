"""`capsbench report`: per-suite tables and figures from every selected tracked run, published numbers beside
measured ones, and one report.md and standalone report.tex assembling them all (the claims table only when asked). A
suite whose runs cannot share a table is skipped with its reason while the others are reported; latest=true takes
each suite's newest run and the older ones measured alike."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
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
    newest_alike,
    parse_when,
    protocol_params,
    readable_records,
    select,
)
from capsbench.reporting.document import Document, Figure, Run, Section, render_latex, render_markdown
from capsbench.reporting.figures import accuracy_vs_cost, save_figure
from capsbench.reporting.headline import headline_values
from capsbench.reporting.outputs import write_suite
from capsbench.reporting.settings import changed_settings
from capsbench.suites import CATALOG, SUITES
from capsbench.tracking import read_config, read_invocations, untabulated_runs
from capsbench.util.atomic import write_text
from capsbench.util.folders import new_run_folder, publish_latest
from capsbench.util.uris import shown_uri

log = logging.getLogger(__name__)


@dataclass
class Report:
    sections: list[Section]
    markdown: Path  # report.md
    latex: Path  # report.tex
    claims: list[verdicts.Judgement]
    skipped: dict[str, str] = field(default_factory=dict)  # suite -> why its runs were not reported (one line)
    latest: Path | None = None  # <output_dir>/report/: the copy of the latest report


def selection(cfg: DictConfig) -> Selection:
    """The report's run filters from its config (suite=claims: every suite, and the claims table)."""
    suite = None if cfg.suite == CLAIMS_SUITE else cfg.suite
    if suite is not None:
        SUITES.get(suite)  # an unknown name fails here with close matches
    since, until = parse_when(cfg.since, "since"), parse_when(cfg.until, "until")
    if since is not None and until is not None and since > until:
        raise CapsbenchError(f"since={cfg.since} is after until={cfg.until}, so no run can match; swap them")
    return Selection(
        suite=suite, models=tuple(cfg.models) if cfg.models else None, dataset=cfg.dataset, budget=cfg.budget,
        version=cfg.version, code=cfg.code, since=since, until=until,
    )


def build_report(cfg: DictConfig) -> Report:
    """Read the selected finished runs, tabulate each suite whose runs can share a table, write everything under the
    report's own folder (<output_dir>/runs/<date>/<time>/report/) and copy it to <output_dir>/report/."""
    sel = selection(cfg)
    found = read_invocations(cfg.tracking.uri, cfg.tracking.experiment)
    claims_runs = [inv for inv in found if inv.suite == CLAIMS_SUITE]
    if claims_runs:  # their units were planned per claim and judged by that command (<output_dir>/claims/)
        log.info("%d run(s) of suite=claims left out: each wrote its own claims table and report", len(claims_runs))
    found = [inv for inv in found if inv.suite != CLAIMS_SUITE]
    chosen = select(found, sel)
    if not chosen:
        have = ", ".join(sorted({f"{i.suite}/{i.budget}/{i.dataset}" for i in found})) or "none"
        unfinished = untabulated_runs(cfg.tracking.uri, cfg.tracking.experiment)
        if not found and unfinished:
            raise CapsbenchError(
                f"no finished runs at {cfg.tracking.uri}: its {len(unfinished)} run(s) tabulated nothing "
                f"({', '.join(sorted(set(unfinished)))}); an interrupted run resumes from its finished units when the "
                "same `capsbench run` command is run again, a running one tabulates when it ends: then report"
            )
        raise CapsbenchError(
            f"no finished runs at {cfg.tracking.uri} match the filters (suite/budget/dataset found: {have}); "
            "loosen suite=, budget=, dataset=, models=, since= or until="
        )
    frames, skipped = {}, {}
    for suite_name in sorted({inv.suite for inv in chosen}):
        if suite_name not in SUITES:
            log.warning("skipping suite %r: this capsbench does not define it", suite_name)
            continue
        records = readable_records(cfg.tracking.uri, [inv for inv in chosen if inv.suite == suite_name])
        invs = [inv for inv in chosen if inv.run_id in records]
        if not invs:
            skipped[suite_name] = (f"suite {suite_name!r}: none of the selected runs has readable records (each is "
                                   "named in a warning above); rerun their commands, or narrow the selection")
            continue
        try:
            invs = newest_alike(invs, sel.models) if cfg.latest else invs
            check_comparable(invs, sel.models)
            frame = combine(invs, records, sel.models)
        except CapsbenchError as exc:
            skipped[suite_name] = str(exc)
            continue
        frames[suite_name] = (invs, frame)
        check_narrow_eps(suite_name, frame, cfg.latex.eps)  # before anything is written
    if not frames:
        raise CapsbenchError("no suite can be reported: " + "; ".join(skipped.values()))
    for name, why in skipped.items():
        log.warning("skipping suite %s: %s", name, why)
    entries = load_baselines(Path(cfg.baselines_dir) if cfg.baselines_dir else None)
    folder = new_run_folder(cfg.output_dir)
    root = folder / "report"
    sections = [_section(name, invs, frame, entries, root, cfg.latex.eps, read_config(cfg.tracking.uri, invs[0].run_id))
                for name, (invs, frame) in frames.items()]
    filters = ", ".join(
        f"{k}={cfg[k]}"
        for k in ("suite", "models", "dataset", "budget", "version", "code", "since", "until", "latest")
        if cfg[k] not in (None, False)
    )
    judged = []
    if cfg.claims or cfg.suite == CLAIMS_SUITE:
        judged = verdicts.judge_all(
            load_claims(Path(cfg.baselines_dir) if cfg.baselines_dir else None),
            {s.suite: verdicts.Run(s.output.frame, s.model_args, s.settings, s.budget) for s in sections},
            cfg.one_seed_verdicts,
        )
    doc = Document(
        datetime.now(timezone.utc),
        f"{shown_uri(cfg.tracking.uri, Path(cfg.output_dir))} (experiment {cfg.tracking.experiment})",
        filters,
        sections,
        _cost_figures(sections, root),
        judged,
        skipped,
    )
    paths = Report(sections, root / "report.md", root / "report.tex", judged, skipped)
    write_text(paths.markdown, render_markdown(doc, root))
    write_text(paths.latex, render_latex(doc, root))
    publish_latest(root, Path(cfg.output_dir) / "report")
    paths.latest = Path(cfg.output_dir) / "report"
    return paths


def _section(name: str, invs: list[Invocation], frame: pd.DataFrame, entries: list[Any], root: Path,
             narrow_eps: list[float] | None, config: dict[str, Any]) -> Section:
    suite_cls = SUITES.get(name)
    records = frame.to_dict("records")
    model_args = {m: args for inv in invs for m, args in inv.model_args.items() if m in set(frame["model"])}
    reported = matching(entries, suite=name, model_args=model_args)
    notes = suite_cls().notes(records, suite_params(name, config.get("params") or {})) if records else []
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
        changed=changed_settings(first.params, name, first.budget),
        values=headline_values(records, suite_cls),
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


def suite_params(suite: str, params: dict[str, Any]) -> Any:
    """The suite's params as the run used them: its Params defaults under the run's typed params (its config.yaml)."""
    return OmegaConf.merge(OmegaConf.create(dataclasses.asdict(CATALOG.get(suite).params())), params)


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
