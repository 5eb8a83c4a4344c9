"""The driver: run a plan (sections of units, then an optional finish step such as judging claims): reuse the units an
earlier run of the same command finished, launch the rest, keep each result on disk and log its MLflow run as it runs
(started, epoch curves, records), then write every section's tables and run the finish step into the run's own folder
(capsbench.util.folders), copied to <output_dir>/<suite>/ as the latest run's files. A section with a failed unit gets
its tables from the units that finished and a FAILED parent run.

Only the driver writes MLflow runs and tables; units (wherever a launcher runs them) only return results and events.
Every unit runs with the thread count its spec fixes (threads=, else this driver's auto_threads()), whatever the
launcher, so that the same command gives the same numbers locally, on Ray and on SLURM.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from capsbench.config.checks import capped_subsets
from capsbench.config.compose import to_dict, to_yaml
from capsbench.errors import CapsbenchError, RunFailed
from capsbench.reporting.baselines import load_baselines, matching
from capsbench.reporting.headline import headline, headline_values, unit_headline
from capsbench.reporting.model_card import write_model_cards
from capsbench.reporting.outputs import SuiteOutput, write_suite
from capsbench.run.cost_model import Credits, device_key, observe, plan_work, price, priced_work, rates
from capsbench.run.external import code_tags, weights_notes
from capsbench.run.launchers import make_launcher
from capsbench.run.model_trial import try_external_models
from capsbench.run.plan import Finished, Plan, Section, suite_plan
from capsbench.run.store import UnitStore
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.tracking import Tracker, environment_tags, flatten, git_state
from capsbench.util.atomic import atomic_file, write_text
from capsbench.util.folders import new_run_folder, publish_latest, run_stamp
from capsbench.util.hashing import package_hash
from capsbench.util.pace import Pace
from capsbench.util.progress import Progress
from capsbench.util.signals import shielded

log = logging.getLogger(__name__)
RECORDS_SCHEMA_VERSION = 1  # of records.jsonl; docs/outputs.md documents the fields


@dataclass
class SuiteResult:
    """One section's outcome: its records, files, Markdown tables, MLflow parent run and failed units."""

    suite: str
    records: list[dict[str, Any]]
    paths: dict[str, Path]
    markdown: str
    parent_run_id: str | None
    missing: list[UnitResult] = field(default_factory=list)  # units that failed: not in the tables
    key: str = ""  # the section's key in its plan
    cfg: DictConfig | None = None
    output: SuiteOutput | None = None  # its tables and frame (None when no unit finished)
    latest: Path | None = None  # <output_dir>/<folder>/: the copy of the latest run's files (None: nothing written)
    headline: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> its first table's numbers
    values: list[dict[str, Any]] = field(default_factory=list)  # those numbers per seed, with n and interval
    experiment_id: str | None = None  # the MLflow experiment of its runs (None: tracking off)


@dataclass
class RunResult:
    """A plan's outcome: every section's, then its finish step's (files, Markdown, its parent run)."""

    sections: list[SuiteResult]
    finished: Finished | None = None
    run_id: str | None = None  # the finish step's parent run
    folder: Path | None = None  # the run's own folder, <output_dir>/runs/<date>/<time>/
    experiment_id: str | None = None  # the MLflow experiment of its runs (None: tracking off)

    @property
    def missing(self) -> list[UnitResult]:
        """Every failed unit, once."""
        return list({u.key: u for s in self.sections for u in s.missing}.values())


def make_tracker(cfg: DictConfig) -> Tracker:
    """The MLflow writer for a run config (a no-op when tracking is disabled)."""
    return Tracker(uri=cfg.tracking.uri, experiment=cfg.tracking.experiment,
                   artifact_root=Path(cfg.output_dir) / "mlartifacts", enabled=cfg.tracking.enabled)


def run_suite(cfg: DictConfig) -> SuiteResult:
    """One suite; see run_plan."""
    return run_plan(suite_plan([cfg])).sections[0]


def run_suites(cfgs: list[DictConfig]) -> list[SuiteResult]:
    """Suites sharing one output directory and launcher, one section each; see run_plan."""
    return run_plan(suite_plan(cfgs)).sections


def run_plan(plan: Plan) -> RunResult:
    """Measure every unit of the plan's sections and write each section's outputs, then run its finish step. A failed
    unit does not stop the others: it is in its section's `missing` (the CLI then exits 3). A fault that stops the run
    after its MLflow runs started (a full disk, a worker's fatal error) is a RunFailed; Ctrl-C and SIGTERM end every
    open run KILLED."""
    cfg = plan.cfg
    for level, line in plan.notes:
        log.log(level, line)
    for line in dict.fromkeys(line for s in plan.sections for line in capped_subsets(s.cfg.data, s.cfg.dataset)):
        log.warning(line)
    units = list({u.key: u for section in plan.sections for u in section.units}.values())
    try_external_models(units)  # they meet data before any write
    tracker = make_tracker(cfg)
    tracker.open()  # a store that cannot be opened is refused before the run's folder exists
    folder = new_run_folder(cfg.output_dir)
    code = {"code.hash": package_hash()}  # what unit keys hash: `report` never mixes runs of different code
    started = False  # whether anything of the run exists yet (its parent runs): then a fault is a failed run
    try:
        top = None
        if plan.finish is not None:
            top = tracker.start_parent(parent_name(plan.finish.name, cfg, folder, models=False),
                                       {**flatten(to_dict(cfg)), **plan.finish.params},
                                       {**environment_tags(cfg.device), **code, **code_tags(units),
                                        "suite": plan.finish.name, "budget": cfg.budget}, to_yaml(cfg))
        routes = Routes(plan.sections)
        for section in plan.sections:
            c = section.cfg
            routes.tags[section.key] = {**environment_tags(c.device), **code, **code_tags(section.units),
                                        "suite": c.suite, "budget": c.budget,
                                        **({"section": section.key} if top else {})}
            routes.parents[section.key] = tracker.start_parent(
                parent_name(section.key, c, folder), flatten(to_dict(c)), routes.tags[section.key], to_yaml(c),
                parent=top)
        started = True
        done = _measure_units(cfg, units, tracker, routes)
        results = [_finish(section, done, tracker, routes.parents[section.key], folder / section.folder)
                   for section in plan.sections]
        finished = None
        if plan.finish is not None:
            finished = plan.finish(results, done, top, folder / plan.finish.name)
            missing = RunResult(results).missing
            tracker.finish_parent(top, finished.metrics, [p for p in finished.paths.values() if p.is_file()],
                                  failed=f"{len(missing)} unit(s) failed" if missing else None)
        _publish(cfg, folder, results)
        for result in results:
            result.experiment_id = tracker.experiment_id
        return RunResult(results, finished, top, folder, tracker.experiment_id)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (capsbench.util.signals)
        traceback.clear_frames(exc.__traceback__)  # a write the signal cut short holds the SQLite store through them
        with shielded():
            ended = tracker.end_open("KILLED")
        if ended:
            exc.add_note(ended)  # the command's one line says what became of the MLflow runs
        raise
    except Exception as exc:
        started = started or bool(tracker.open_parents)
        with shielded():
            tracker.end_open("FAILED", error=f"{type(exc).__name__}: {exc}")
        if started and isinstance(exc, CapsbenchError) and not isinstance(exc, RunFailed):
            raise RunFailed(str(exc)) from exc  # found after the run started (a full disk): exit 3, not 2
        raise


class Routes:
    """Where each unit's MLflow run goes: the parent run, tags and sweep columns of its section (a unit planned in
    two sections belongs to the first)."""

    def __init__(self, sections: list[Section]) -> None:
        self.section = {}
        for section in sections:
            for unit in section.units:
                self.section.setdefault(unit.key, section.key)
        self.parents: dict[str, str | None] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self.columns = {s.key: SUITES.get(s.cfg.suite).sweep_columns for s in sections}

    def of(self, unit_key: str) -> tuple[str | None, dict[str, str], tuple]:
        """(parent run, tags, sweep columns) of a unit."""
        key = self.section[unit_key]
        return self.parents[key], self.tags[key], self.columns[key]


def _measure_units(cfg: DictConfig, units: list[UnitSpec], tracker: Tracker, routes: Routes) -> dict[str, UnitResult]:
    """Every unit's result by key: kept from an earlier run of the same command (unless cfg.remeasure), or launched
    now through cfg's launcher; each is logged under its section's parent run as it arrives."""
    store = UnitStore(cfg.output_dir)
    done: dict[str, UnitResult] = {}
    for unit in units:
        if not cfg.remeasure and (kept := store.load(unit)) is not None:
            done[unit.key] = kept
    todo = [u for u in units if u.key not in done]
    log.info(
        "%d unit(s): %d finished by an earlier run of this command, %d to run",
        len(done) + len(todo),
        len(done),
        len(todo),
    )
    for result in done.values():
        parent, tags, columns = routes.of(result.key)
        tracker.log_unit(parent, result, tags, columns, reused=True,
                         headline=unit_headline(result.records, SUITES.get(result.spec.suite)))
    _launch(cfg, todo, store, done, LiveUnits(tracker, todo, routes))
    return done


class LiveUnits:
    """The nested MLflow runs of the units under way: each starts at its unit's first event (when it started,
    wherever it runs), takes its epochs as they come, and ends with its result."""

    def __init__(self, tracker: Tracker, units: list[UnitSpec], routes: Routes) -> None:
        self.tracker, self.routes = tracker, routes
        self.units = {u.key: u for u in units}
        self.runs: dict[str, str | None] = {}
        self.epochs: dict[str, set[int]] = {}

    def on_event(self, event: UnitEvent) -> None:
        """Start the unit's run on its first event; log each epoch once (a retried task sends them again)."""
        unit = self.units.get(event.key)
        if unit is None:
            return
        if event.key not in self.runs:
            parent, tags, _ = self.routes.of(unit.key)
            self.runs[event.key] = self.tracker.start_unit(parent, unit, tags, reused=False,
                                                           start_ms=int(event.time * 1000), host=event.host)
            self.epochs[event.key] = set()
        if event.kind == "epoch" and int(event.data["epoch"]) not in self.epochs[event.key]:
            self.tracker.log_epoch(self.runs[event.key], event.data, int(event.time * 1000))
            self.epochs[event.key].add(int(event.data["epoch"]))

    def finish(self, result: UnitResult) -> None:
        """End the unit's run with its result (started now if the unit sent no event, e.g. a worker lost early)."""
        parent, tags, columns = self.routes.of(result.key)
        if result.key not in self.runs:
            self.runs[result.key] = self.tracker.start_unit(parent, result.spec, tags, reused=False, host=result.host)
        self.tracker.end_unit(self.runs.pop(result.key), result, columns, streamed=self.epochs.pop(result.key, set()),
                              headline=unit_headline(result.records, SUITES.get(result.spec.suite)))


def _launch(cfg: DictConfig, todo: list[UnitSpec], store: UnitStore, done: dict[str, UnitResult],
            live: LiveUnits) -> None:
    """Run the missing units; keep and log each result as it arrives (a kill later loses none of them). The bar
    counts each unit's work in seconds as the cost model prices it on this device (capsbench.run.cost_model) and
    credits it as the unit reports it (each training epoch, its measuring); its time left starts at the cost model's,
    its basis said, and learns the rate this run shows (capsbench.util.pace)."""
    failures = 0
    work = plan_work(todo)
    device, table = device_key(cfg.device), rates(cfg.cache_dir)
    seconds = priced_work(todo, work, device, table)
    credits = Credits(seconds, todo, declared=work)
    estimate = price(todo, work, device, table)
    log.info("%d unit(s) to run: %s by the cost model, %s%s", len(todo), estimate.words(),
             estimate.basis or f"on {estimate.device}", f" ({estimate.why})" if estimate.why else "")
    total = sum(w.total for w in seconds.values())
    with Progress("units", total, unit="s", leave=True, pace=Pace.priced(total, total)) as bar:
        bar.note(f"0/{len(todo)} done")

        def on_event(event: UnitEvent) -> None:
            live.on_event(event)
            if step := credits.event(event):
                bar.update(step)

        for n, result in enumerate(make_launcher(cfg).run(todo, on_event), 1):
            if result.status == "done":
                store.save(result)
                observe(result, work[result.key], device, cfg.cache_dir)  # this machine's rates, for later plans
            else:
                failures += 1
                log.error("unit %s failed: %s", result.spec.name, result.error)
            done[result.key] = result
            live.finish(result)
            status = f"{n}/{len(todo)} done, last {result.spec.name}" + (f", {failures} failed" if failures else "")
            bar.update(credits.finished(result), status=status)


def failure_line(result: UnitResult) -> str:
    """One line for a failed unit: its name, its exception, and whether running the same command again can help."""
    then = ("a rerun of the same command may succeed (it measures only the missing units)" if result.rerun_helps
            else "fix the cause first: a rerun alone repeats it")
    return f"{result.spec.name}: the unit failed ({result.error}); {then}"


def _finish(section: Section, done: dict[str, UnitResult], tracker: Tracker, parent_id: str | None,
            out_dir: Path) -> SuiteResult:
    """The section's records, tables, records.jsonl, config.yaml and its units' figures (figures/) under `out_dir`, and
    its parent run's headline metrics; the parent is FAILED, naming the failed units, when some failed (with no tables
    when none finished)."""
    cfg, units = section.cfg, section.units
    suite_cls = SUITES.get(cfg.suite)
    finished = [done[u.key] for u in units if u.key in done and done[u.key].status == "done"]
    missing = [done[u.key] for u in units if u.key in done and done[u.key].status != "done"]
    records = [r for result in finished for r in result.records]
    failed = f"{len(missing)} unit(s) failed: " + " | ".join(failure_line(r) for r in missing) if missing else None
    if not records:
        tracker.finish_parent(parent_id, {}, [], failed=failed or "no unit produced records")
        return SuiteResult(cfg.suite, [], {}, "", parent_id, missing, section.key, cfg)
    notes = suite_cls().notes(records, cfg.params) + weights_notes(records) + [
        f"MISSING {failure_line(r)}" for r in missing]
    output = write_suite(out_dir, records, suite_cls, published_beside(cfg.suite, finished), notes=notes)
    paths = dict(output.paths)
    paths["records.jsonl"] = out_dir / "records.jsonl"
    write_text(paths["records.jsonl"], records_jsonl(records))
    paths["config.yaml"] = out_dir / "config.yaml"
    write_text(paths["config.yaml"], to_yaml(cfg))
    figures = [_copied(Path(p), out_dir / "figures") for result in finished for p in result.figures]
    weights: dict[str, dict[int, str]] = defaultdict(dict)
    for result in finished:
        if sha := result.params.get("weights.tensors_sha256"):
            weights[result.spec.model][result.spec.seed] = sha
    cards = write_model_cards(out_dir / "model-cards", records, suite_cls, budget=cfg.budget, code_hash=package_hash(),
                              weights=weights, runs=card_runs(finished, cfg, suite_cls))
    paths.update({f"model-cards/{p.name}": p for p in cards})
    tracker.finish_parent(parent_id, headline_metrics(records, suite_cls), [*paths.values(), *figures], failed=failed)
    return SuiteResult(cfg.suite, records, paths, paths["table.md"].read_text(), parent_id, missing, section.key, cfg,
                       output, headline=headline(records, suite_cls), values=headline_values(records, suite_cls))


def card_runs(finished: list[UnitResult], cfg: DictConfig, suite_cls: Any) -> dict[str, dict[str, Any]]:
    """Per model what its card says beside its records: its arguments, the checkpoint of each seed, the device and
    threads, the commit, and the suite's own details (the threat model, each attack's budget)."""
    commit, dirty = git_state()
    out: dict[str, dict[str, Any]] = {}
    for result in finished:
        card = out.setdefault(result.spec.model, {
            "model_args": {k.removeprefix("model_args."): v for k, v in result.params.items()
                           if k.startswith("model_args.")},
            "checkpoints": {}, "device": f"{cfg.device}, {cfg.threads} threads" if cfg.device == "cpu" else cfg.device,
            "commit": commit + (" (uncommitted changes)" if dirty else ""),
            **suite_cls().card_details(cfg.params, cfg.dataset)})
        if key := result.params.get("checkpoint.key"):
            card["checkpoints"][str(result.spec.seed)] = key
    return out


def _copied(path: Path, folder: Path) -> Path:
    """A copy of a unit's figure in the run's folder (the unit wrote it under the unit store, by its key)."""
    with path.open("rb") as src, atomic_file(folder / path.name, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return folder / path.name


def _publish(cfg: DictConfig, folder: Path, results: list[SuiteResult]) -> None:
    """Copy each top-level folder the run wrote (a suite's, or claims/) to <output_dir>/<name>/: the latest files."""
    for name in sorted(p.name for p in folder.iterdir() if p.is_dir()):
        publish_latest(folder / name, Path(cfg.output_dir) / name)
    for result in results:
        if result.paths:
            result.latest = Path(cfg.output_dir) / result.paths["table.md"].parent.relative_to(folder)


def parent_name(key: str, cfg: DictConfig, folder: Path, *, models: bool = True) -> str:
    """A parent run's name: what ran (suite, budget, models) and when (the run folder's stamp, unique), e.g.
    accuracy-quick-capsnet,cnn_9x9-20261121-143005."""
    shown = (",".join(cfg.models) if len(cfg.models) <= 3 else f"{len(cfg.models)}models") if models else ""
    return "-".join(part for part in (key, cfg.budget, shown, run_stamp(folder)) if part)


def records_jsonl(records: list[dict[str, Any]]) -> str:
    """records.jsonl's text: one record a line, with the schema version (docs/outputs.md documents the fields)."""
    return "".join(json.dumps({"schema_version": RECORDS_SCHEMA_VERSION, **r}, default=str) + "\n" for r in records)


def headline_metrics(records: list[dict[str, Any]], suite_cls: Any) -> dict[str, float]:
    """The parent run's few named metrics: per model, its first table's numbers (mean over seeds), as
    <model>/<attack or metric>[ <sweep column> <value>], e.g. capsnet/worst_case eps 0.1 (the units hold the rest)."""
    out = {}
    for row in headline_values(records, suite_cls):
        words = [str(row.get("attack") or row["metric"])]
        words += [f"{c} {row[c]:g}" if isinstance(row[c], float) else f"{c} {row[c]}"
                  for c in suite_cls.sweep_columns if c != "attack" and c in row]
        name = re.sub(r"[^\w\-. :/]", "_", f"{row['model']}/{' '.join(words)}")  # what MLflow accepts in a name
        out.setdefault(name, []).append(row["value"])
    return {k: sum(v) / len(v) for k, v in out.items()}


def published_beside(suite: str, finished: list[UnitResult]) -> list[dict[str, Any]]:
    """Published numbers (baselines/) for the models measured, matched on their constructor arguments as logged.

    A model measured in several variants (e.g. routing iterations) gets none here: its rows differ in the
    arguments a published number is tied to; `capsbench report` handles that per invocation.
    """
    built_with: dict[str, set[tuple]] = defaultdict(set)
    for result in finished:
        args = {k.removeprefix("model_args."): str(v) for k, v in result.params.items() if k.startswith("model_args.")}
        built_with[result.spec.model].add(tuple(sorted(args.items())))
    single = {model: dict(next(iter(args))) for model, args in built_with.items() if len(args) == 1}
    return matching(load_baselines(), suite=suite, model_args=single)
