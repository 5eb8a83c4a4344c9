"""The driver: plan the units of one or more suites, reuse the ones an earlier run of the same command finished, launch
the rest, keep each result on disk and log its MLflow run the moment it arrives, then write every suite's tables.

Only the driver writes MLflow runs and tables; units (wherever a launcher runs them) only return results.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from capsbench.config.compose import to_dict, to_yaml
from capsbench.errors import CapsbenchError
from capsbench.reporting.baselines import load_baselines, matching
from capsbench.reporting.outputs import write_outputs
from capsbench.run.launchers import make_launcher
from capsbench.run.plan import plan
from capsbench.run.store import UnitStore
from capsbench.run.units import UnitResult, UnitSpec
from capsbench.run.workload import Work, plan_work
from capsbench.suites import SUITES
from capsbench.tracking import Tracker, environment_tags, flatten, metric_key
from capsbench.util.atomic import write_text
from capsbench.util.progress import Progress

log = logging.getLogger(__name__)
RECORDS_SCHEMA_VERSION = 1  # of records.jsonl; README documents the fields


@dataclass
class SuiteResult:
    suite: str
    records: list[dict[str, Any]]
    paths: dict[str, Path]
    markdown: str
    parent_run_id: str | None
    missing: list[UnitResult] = field(default_factory=list)  # units that failed: not in the tables


def make_tracker(cfg: DictConfig) -> Tracker:
    """The MLflow writer for a run config (a no-op when tracking is disabled)."""
    return Tracker(uri=cfg.tracking.uri, experiment=cfg.tracking.experiment,
                   artifact_root=Path(cfg.output_dir) / "mlartifacts", enabled=cfg.tracking.enabled)


def run_suite(cfg: DictConfig) -> SuiteResult:
    """One suite; see run_suites."""
    return run_suites([cfg])[0]


def run_suites(cfgs: list[DictConfig]) -> list[SuiteResult]:
    """Measure every unit of the suites (sharing one output directory and launcher) and write their outputs."""
    first = cfgs[0]
    plans = {cfg.suite: plan(cfg) for cfg in cfgs}
    store, tracker = UnitStore(first.output_dir), make_tracker(first)
    done: dict[str, UnitResult] = {}
    for cfg in cfgs:
        for unit in plans[cfg.suite]:
            if not cfg.remeasure and (kept := store.load(unit)) is not None:
                done[unit.key] = kept
    todo = [u for units in plans.values() for u in units if u.key not in done]
    log.info(
        "%d unit(s): %d finished by an earlier run of this command, %d to run",
        len(done) + len(todo),
        len(done),
        len(todo),
    )
    tags = {cfg.suite: {**environment_tags(cfg.device), "suite": cfg.suite, "budget": cfg.budget} for cfg in cfgs}
    parents = {
        cfg.suite: tracker.start_parent(
            f"{cfg.suite}-{cfg.budget}", flatten(to_dict(cfg)), tags[cfg.suite], to_yaml(cfg)
        )
        for cfg in cfgs
    }
    columns = {cfg.suite: SUITES.get(cfg.suite).sweep_columns for cfg in cfgs}
    try:
        for result in done.values():
            suite = result.spec.suite
            tracker.log_unit(parents[suite], result, tags[suite], columns[suite], reused=True)
        _launch(first, todo, store, tracker, done, parents, tags, columns)
        return [_finish(cfg, plans[cfg.suite], done, tracker, parents[cfg.suite]) for cfg in cfgs]
    except KeyboardInterrupt:
        tracker.end_open("KILLED")
        raise
    except Exception as exc:
        tracker.end_open("FAILED", error=f"{type(exc).__name__}: {exc}")
        raise


def _launch(
    cfg: DictConfig,
    todo: list[UnitSpec],
    store: UnitStore,
    tracker: Tracker,
    done: dict[str, UnitResult],
    parents: dict[str, str | None],
    tags: dict[str, dict[str, str]],
    columns: dict[str, tuple],
) -> None:
    """Run the missing units; keep and log each result as it arrives (a kill later loses none of them). The bar
    weighs each unit by its declared work (capsbench.run.workload), so its time left is the work left at the rate
    measured so far."""
    failures = 0
    work = plan_work(todo)
    with Progress("units", sum(w.total for w in work.values()), unit="pass", leave=True) as bar:
        bar.note(f"0/{len(todo)} done")
        for n, result in enumerate(make_launcher(cfg).run(todo), 1):
            if result.status == "done":
                store.save(result)
            else:
                failures += 1
                log.error("unit %s failed: %s", result.spec.name, result.error)
            done[result.key] = result
            suite = result.spec.suite
            tracker.log_unit(parents[suite], result, tags[suite], columns[suite], reused=False)
            w = work[result.key]
            if cfg.launcher == "local" and result.params.get("checkpoint.cached"):
                bar.add_total(-w.train)  # its checkpoint was in the cache: no training (elsewhere a task trains it)
                w = Work(0.0, w.measure)
            status = f"{n}/{len(todo)} done, last {result.spec.name}" + (f", {failures} failed" if failures else "")
            bar.update(w.total, status=status)


def _finish(
    cfg: DictConfig, units: list[UnitSpec], done: dict[str, UnitResult], tracker: Tracker, parent_id: str | None
) -> SuiteResult:
    """The suite's records, tables, records.jsonl and config.yaml, and its parent run's headline metrics."""
    suite_cls = SUITES.get(cfg.suite)
    finished = [done[u.key] for u in units if u.key in done and done[u.key].status == "done"]
    missing = [done[u.key] for u in units if u.key in done and done[u.key].status != "done"]
    records = [r for result in finished for r in result.records]
    if not records:
        cause = f" ({missing[0].spec.name}: {missing[0].error})" if missing else ""
        raise CapsbenchError(
            f"no unit of suite {cfg.suite!r} produced records{cause}; "
            "see the log above, fix the cause and run the same command again"
        )
    out_dir = Path(cfg.output_dir) / cfg.suite
    notes = suite_cls().notes(records, cfg.params) + [
        f"MISSING {r.spec.name}: the unit failed ({r.error}); rerun the same command to measure it" for r in missing
    ]
    paths = write_outputs(out_dir, records, suite_cls, published_beside(cfg.suite, finished), notes=notes)
    paths["records.jsonl"] = out_dir / "records.jsonl"
    write_text(
        paths["records.jsonl"],
        "".join(json.dumps({"schema_version": RECORDS_SCHEMA_VERSION, **r}, default=str) + "\n" for r in records),
    )
    paths["config.yaml"] = out_dir / "config.yaml"
    write_text(paths["config.yaml"], to_yaml(cfg))
    figures = [Path(p) for result in finished for p in result.figures]
    tracker.finish_parent(parent_id, headline_metrics(records, suite_cls), [*paths.values(), *figures])
    return SuiteResult(cfg.suite, records, paths, paths["table.md"].read_text(), parent_id, missing)


def headline_metrics(records: list[dict[str, Any]], suite_cls: Any) -> dict[str, float]:
    """Per model and tabulated metric coordinate, the mean over seeds: <model>.<metric>.<coordinates>."""
    layout = suite_cls.layout
    shown = None if layout is None else {m for table in layout.tables for m in table.metrics}
    values: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if shown is None or r["metric"] in shown:
            values[f"{r['model']}.{metric_key(r, suite_cls.sweep_columns)}"].append(float(r["value"]))
    return {k: sum(v) / len(v) for k, v in values.items()}


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
