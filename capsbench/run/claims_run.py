"""`capsbench run suite=claims`: say up front which claims lack data and which would take over an hour, measure every
unit of the chosen claims once (on any launcher; results and checkpoints are shared with ordinary runs), judge each
claim on the records of its own units, and write the claims table and the report under <output_dir>/claims/."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from capsbench.config.compose import to_dict, to_yaml
from capsbench.reporting.claim_files import CLAIMS_SUITE, Claim
from capsbench.reporting.claims_report import ClaimsRun, Part, write_claims
from capsbench.reporting.frame import records_frame
from capsbench.reporting.verdicts import NO_RECORDS, Judgement, Run, judge, render_markdown, verdict_counts
from capsbench.run.claims_plan import ClaimPlan
from capsbench.run.driver import RECORDS_SCHEMA_VERSION, make_tracker, measure_units
from capsbench.run.units import UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.tracking import environment_tags, flatten
from capsbench.util.atomic import write_text
from capsbench.util.hashing import package_hash
from capsbench.util.version import __version__

log = logging.getLogger(__name__)
SETTINGS = ("train.", "data.", "params.")  # what a claim's `run` and a side's `settings` are checked against
WHERE_NOT_WHAT = ("data.root", "data.download")


@dataclass
class ClaimsResult:
    judged: list[Judgement]
    paths: dict[str, Path]
    markdown: str  # the claims table as printed
    parent_run_id: str | None
    missing: list[UnitResult] = field(default_factory=list)  # units that failed


def announce(plan: ClaimPlan) -> None:
    """Before anything runs: what is planned, which claims lack data (the files, where to get them), what is long."""
    cfg = plan.cfg
    log.info("suite=claims at budget=%s, seeds %s: %d of %d claims planned, %d units in %d suite configs",
             cfg.budget, list(cfg.seeds), len(plan.units), len(plan.claims), len(plan.all_units), len(plan.sections))
    for cid, lines in plan.lacking.items():
        log.warning("claim %s is not planned, its data files are absent: %s", cid, "; ".join(lines))
    for cid, lines in plan.downloads.items():
        log.warning("claim %s: %s", cid, "; ".join(lines))
    for cid, found in plan.long.items():
        hours = "many hours" if found.minutes == float("inf") else f"about {found.minutes / 60:.1f} h"
        log.warning("claim %s: its units would take %s on 2 CPU cores%s", cid, hours,
                    f" ({found.why})" if found.why else "")
    if plan.total.minutes is not None and plan.total.minutes != float("inf"):
        log.info("estimated time of the units still to run: about %.1f h on 2 CPU cores", plan.total.minutes / 60)
    if plan.long:
        short = [c.id for c in plan.claims if c.id in plan.units and c.id not in plan.long]
        log.warning("to leave the long claims out: capsbench run suite=claims budget=%s claims=[%s]", cfg.budget,
                    ",".join(short))


def run_claims(plan: ClaimPlan) -> ClaimsResult:
    """Measure the plan's units, judge every chosen claim, write <output_dir>/claims/ and the MLflow parent run."""
    cfg, started = plan.cfg, datetime.now(timezone.utc)
    units = plan.all_units
    tracker = make_tracker(cfg)
    env = {**environment_tags(cfg.device), "code.hash": package_hash()}  # as run_suites tags its runs
    suites = sorted({u.suite for u in units})
    parent = tracker.start_parent(
        f"{CLAIMS_SUITE}-{cfg.budget}",
        {**flatten(to_dict(cfg)), "claims": [c.id for c in plan.claims]},
        {**env, "suite": CLAIMS_SUITE, "budget": cfg.budget},
        to_yaml(cfg),
    )
    try:
        done = measure_units(cfg, units, tracker, {s: parent for s in suites},
                             {s: {**env, "suite": s, "budget": cfg.budget} for s in suites},
                             {s: SUITES.get(s).sweep_columns for s in suites})
        judged = [_judgement(c, plan, done) for c in plan.claims]
        root = Path(cfg.output_dir) / CLAIMS_SUITE
        command = "capsbench run " + " ".join(plan.overrides)
        source = f"MLflow run {parent} in {cfg.tracking.uri}" if parent else "tracking off"
        run = ClaimsRun(cfg.budget, __version__, list(cfg.seeds), parent, source, command.strip(), started)
        paths = write_claims(root, judged, plan.lacking, _parts(plan, done), run)
        records = [r for u in units if _finished(done, u) for r in done[u.key].records]
        paths["records.jsonl"] = root / "records.jsonl"
        write_text(paths["records.jsonl"], "".join(
            json.dumps({"schema_version": RECORDS_SCHEMA_VERSION, **r}, default=str) + "\n" for r in records))
        counts = {f"verdicts.{k.replace(' ', '_')}": float(v) for k, v in verdict_counts(judged).items()}
        tracker.finish_parent(parent, counts, [p for p in paths.values() if p.is_file()])
    except KeyboardInterrupt:
        tracker.end_open("KILLED")
        raise
    except Exception as exc:
        tracker.end_open("FAILED", error=f"{type(exc).__name__}: {exc}")
        raise
    missing = [done[u.key] for u in units if u.key in done and done[u.key].status != "done"]
    return ClaimsResult(judged, paths, render_markdown(judged), parent, missing)


def _finished(done: dict[str, UnitResult], unit: UnitSpec) -> bool:
    return unit.key in done and done[unit.key].status == "done"


def _judgement(claim: Claim, plan: ClaimPlan, done: dict[str, UnitResult]) -> Judgement:
    """The claim's verdict from its own units' records; a claim whose data are absent has none."""
    if claim.id in plan.lacking:
        return Judgement(claim, NO_RECORDS, "data files absent: " + "; ".join(plan.lacking[claim.id]),
                         budget=plan.cfg.budget, needs="the data files: " + ", ".join(
                             line.split(":")[0] for line in plan.lacking[claim.id]))
    units = plan.units[claim.id]
    finished = [done[u.key] for u in units if _finished(done, u)]
    records = [r for result in finished for r in result.records]
    model_args = {r.spec.model: _logged_args(r) for r in finished}
    run = Run(records_frame(records, SUITES.get(claim.suite)), model_args, _settings(claim, finished),
              plan.cfg.budget)
    judged = judge(claim, run, plan.one_seed)
    failed = [done[u.key] for u in units if u.key in done and done[u.key].status != "done"]
    if not failed:
        return judged
    why = "; ".join(f"{r.spec.name} failed ({r.error})" for r in failed)
    return Judgement(claim, judged.verdict, f"{judged.reason}; {why}", judged.better, judged.worse, judged.p,
                     judged.budget, judged.seeds, "rerun the same command (failed units are measured again)")


def _logged_args(result: UnitResult) -> dict[str, str]:
    return {k.removeprefix("model_args."): str(v) for k, v in result.params.items() if k.startswith("model_args.")}


def _settings(claim: Claim, finished: list[UnitResult]) -> dict[str, str]:
    """The run settings (train.*, data.*, params.*) as MLflow logs them: those both sides' units share, and each
    side's own declared settings from its own units."""
    flat = {}
    for name in ("better", "worse"):
        model = getattr(claim, name).model
        result = next((r for r in finished if r.spec.model == model), None)
        flat[name] = _flat(result.spec.config) if result is not None else {}
    shared = {k: v for k, v in flat["better"].items() if flat["worse"].get(k) == v}
    own = {k: flat[n][k] for n in ("better", "worse") for k in getattr(claim, n).settings if k in flat[n]}
    return {**shared, **own}


def _flat(config: dict[str, Any]) -> dict[str, str]:
    flat = flatten(config)
    return {k: str(v) for k, v in flat.items() if k.startswith(SETTINGS) and k not in WHERE_NOT_WHAT}


def _parts(plan: ClaimPlan, done: dict[str, UnitResult]) -> list[Part]:
    """One report section per suite config of the plan, with the claims it serves."""
    parts, counter = [], defaultdict(int)
    for cfg, units in plan.sections:
        keys = {u.key for u in units}
        finished = [done[u.key] for u in units if _finished(done, u)]
        counter[(cfg.suite, cfg.dataset)] += 1
        parts.append(Part(
            label=f"{cfg.suite}-{cfg.dataset}-{counter[(cfg.suite, cfg.dataset)]}",
            suite=cfg.suite,
            dataset=cfg.dataset,
            claims=[cid for cid, mine in plan.units.items() if keys & {u.key for u in mine}],
            records=[r for result in finished for r in result.records],
            settings=_flat(OmegaConf.to_container(cfg, resolve=True)),
            model_args={r.spec.model: _logged_args(r) for r in finished},
            params=cfg.params,
        ))
    return parts
