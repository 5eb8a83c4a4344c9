"""The finish step of `capsbench run suite=claims`: judge each chosen claim on the records of its own units (measured by
the driver like any suite's) and write the claims table and one report over the sections' tables under
claims/ of the run's folder (copied to <output_dir>/claims/)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from capsbench.reporting.claim_files import CLAIMS_SUITE, SIDES, Claim
from capsbench.reporting.claims_report import ClaimsRun, write_claims
from capsbench.reporting.document import Run, Section
from capsbench.reporting.frame import records_frame
from capsbench.reporting.settings import changed_settings
from capsbench.reporting.verdicts import (
    NO_RECORDS,
    PROTOCOL_NOT_MET,
    Judgement,
    judge_claim,
    render_markdown,
    verdict_counts,
)
from capsbench.reporting.verdicts import Run as Evidence
from capsbench.run.driver import SuiteResult, records_jsonl
from capsbench.run.plan import Finished
from capsbench.run.units import UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.tracking import flatten
from capsbench.util.atomic import write_text
from capsbench.util.version import __version__

SETTINGS = ("train.", "data.", "params.")  # what a claim's `run` and a side's `settings` are checked against
WHERE_NOT_WHAT = ("data.root", "data.download")


class JudgeClaims:
    """Judges the claims of a claims plan once its sections are measured (see module docstring).

    Args:
        claims: the chosen claims, in file order.
        units: claim id -> its units; lacking: claim id -> its absent datasets (capsbench.run.claims_plan.Absent; it
            has no units).
        unplanned: claim id -> the budget its protocol assumes and what it would cost there (claims_plan.Unplanned).
        sections: section key -> the keys of its units; sides: (claim id, "better" or "worse") -> the keys of that
            side's units.
        one_seed: allow verdicts from one seed; budget, seeds: the run's; command: the command line as typed.
        store: the MLflow store as the files name it (capsbench.util.uris.shown_uri).
    """

    name = CLAIMS_SUITE

    def __init__(self, *, claims: list[Claim], units: dict[str, list[UnitSpec]], lacking: dict[str, list[Any]],
                 unplanned: dict[str, Any], sections: dict[str, set[str]], one_seed: bool, budget: str,
                 seeds: list[int], store: str, command: str, sides: dict[tuple[str, str], set[str]]) -> None:
        self.claims, self.units, self.lacking, self.sections = claims, units, lacking, sections
        self.sides = sides
        self.unplanned = unplanned
        self.one_seed = one_seed
        self.budget, self.seeds, self.command = budget, seeds, command
        self.store = store  # the MLflow store as the files show it (no absolute local path)
        self.params = {"claims": [c.id for c in claims]}
        self.started = datetime.now(timezone.utc)

    def __call__(self, sections: list[SuiteResult], done: dict[str, UnitResult], run_id: str | None,
                 root: Path) -> Finished:
        judged = [j for c in self.claims for j in self._judgements(c, done)]
        source = f"MLflow run {run_id} in {self.store}" if run_id else "tracking off"
        run = ClaimsRun(self.budget, __version__, self.seeds, run_id, source, self.command, self.started)
        parts = [self._section(s, done, run) for s in sections if s.output is not None]
        paths = write_claims(root, judged, self.lacking, parts, run)
        paths["records.jsonl"] = root / "records.jsonl"
        write_text(paths["records.jsonl"], records_jsonl([r for s in sections for r in s.records]))
        counts = verdict_counts(judged)
        return Finished(paths, render_markdown(judged),
                        {f"verdicts.{k.replace(' ', '_')}": float(v) for k, v in counts.items()},
                        {"claims": [{"id": j.claim.id, "verdict": j.verdict, "reason": j.reason} for j in judged]},
                        judged)

    def _section(self, result: SuiteResult, done: dict[str, UnitResult], run: ClaimsRun) -> Section:
        """The report section of one measured section: the tables the driver wrote, and the claims they serve."""
        keys = self.sections[result.key]
        claims = [cid for cid, mine in self.units.items() if keys & {u.key for u in mine}]
        finished = [done[k] for k in keys if k in done and done[k].status == "done"]
        frame = result.output.frame
        suite_cls = SUITES.get(result.suite)
        return Section(
            suite=result.key,
            description=f"{suite_cls.description}; for the claims {', '.join(claims)}",
            output=result.output,
            budget=result.cfg.budget,  # the section's: a paper-budget claim's section is measured at paper
            version=run.version,
            datasets=[result.cfg.dataset],
            runs=[Run(result.parent_run_id or "(tracking off)", run.started, str(run.seeds))],
            seeds={m: sorted(int(s) for s in g["seed"].unique()) for m, g in frame.groupby("model", sort=False)},
            settings=_flat(OmegaConf.to_container(result.cfg, resolve=True)),
            model_args={r.spec.model: logged_args(r) for r in finished},
            changed=changed_settings({k: str(v) for k, v in flatten(OmegaConf.to_container(result.cfg, resolve=True))
                                      .items()}, result.cfg.suite, result.cfg.budget),
        )

    def _judgements(self, claim: Claim, done: dict[str, UnitResult]) -> list[Judgement]:
        """The claim's verdicts (one per device for a cost claim) from its own units' records; a claim whose data are
        absent has none."""
        if claim.id in self.lacking:
            absent = self.lacking[claim.id]
            return [Judgement(claim, NO_RECORDS, "data files absent: " + "; ".join(a.line() for a in absent),
                              budget=self.budget, needs="the data files: " + ", ".join(a.dataset for a in absent))]
        if claim.id in self.unplanned:
            why = self.unplanned[claim.id]
            return [Judgement(claim, PROTOCOL_NOT_MET, f"not measured: {why.words()}", budget=self.budget,
                              needs=why.command)]
        units = self.units[claim.id]
        finished = [done[u.key] for u in units if _finished(done, u)]
        settings, budget = _settings(claim, finished), _measured_budget(units, self.budget)
        evidence = _evidence(claim, finished, settings, budget)
        if claim.better.model == claim.worse.model:  # one model measured two ways: each side from its own units
            evidence = replace(evidence, sides={
                name: _evidence(claim, [r for r in finished if r.spec.key in self.sides[(claim.id, name)]], settings,
                                budget) for name in SIDES})
        judged = judge_claim(claim, evidence, self.one_seed)
        failed = [done[u.key] for u in units if u.key in done and done[u.key].status != "done"]
        if not failed:
            return judged
        why = "; ".join(f"{r.spec.name} failed ({r.error})" for r in failed)
        again = "rerun the same command (failed units are measured again)"
        return [replace(j, reason=f"{j.reason}; {why}", needs=again) for j in judged]


def _evidence(claim: Claim, finished: list[UnitResult], settings: dict[str, str], budget: str) -> Evidence:
    """The records of `finished` units and their constructor arguments, for judging `claim`."""
    records = [r for result in finished for r in result.records]
    return Evidence(records_frame(records, SUITES.get(claim.suite)), {r.spec.model: logged_args(r) for r in finished},
                    settings, budget)


def _measured_budget(units: list[UnitSpec], budget: str) -> str:
    """The budget the claim's units were measured at (one section's: a claim whose protocol assumes budget=paper and
    whose suite trains nothing is measured at paper whatever the run's budget), else the run's `budget`."""
    found = {str(u.config["budget"]) for u in units}
    return found.pop() if len(found) == 1 else budget


def _finished(done: dict[str, UnitResult], unit: UnitSpec) -> bool:
    return unit.key in done and done[unit.key].status == "done"


def logged_args(result: UnitResult) -> dict[str, str]:
    """A unit's constructor arguments as MLflow logged them."""
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
