"""Writing MLflow runs from the driver alone: one parent run per suite of an invocation (its config, headline metrics,
tables and figures) and one nested run per unit, started when the unit starts, fed its epoch curves as they arrive
and ended with its records, checkpoint and true duration, so the store is never written concurrently. Every run
carries the driver's host, pid and process start, so a run left RUNNING by a killed driver is found and closed."""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from capsbench.errors import CapsbenchError, NoSpace, RunFailed, is_no_space, store_moved
from capsbench.tracking.environment import process_tags
from capsbench.tracking.metrics import CURVES, Metric, curve_metrics, metric_key, record_metrics
from capsbench.tracking.store import end_runs, mlflow_client, open_experiment, recover_stale_runs, store_faults
from capsbench.util.uris import sqlite_path

log = logging.getLogger(__name__)
BATCH = 900  # MLflow accepts up to 1000 metrics (and 100 params) per log_batch call
PARAM_BATCH = 90
CHECKPOINT_DIR = "checkpoint"  # artifact folder of a unit's checkpoint file
NOTE = "mlflow.note.content"  # the run's description, shown (as Markdown) at the top of its page in the UI


class UnitIdentity(Protocol):
    """What the writer reads of a unit's spec (capsbench.run.units.UnitSpec)."""

    name: str
    key: str
    model: str
    seed: int
    dataset: str
    variant: dict[str, Any]
    config: dict[str, Any]


class LoggedUnit(Protocol):
    """What the writer reads of a unit's result (capsbench.run.units.UnitResult): the driver hands results in, this
    package never imports the run package above it."""

    key: str
    spec: UnitIdentity
    status: str
    records: list[dict[str, Any]]
    params: dict[str, Any]
    metrics: dict[str, float]
    curves: list[dict[str, float]]
    figures: list[str]
    error: str | None
    host: str
    machine: dict[str, str]


def headline_note(headline: dict[str, float]) -> str:
    """A unit run's description: its headline numbers as a Markdown table (the full set is among its metrics)."""
    rows = [f"| {k} | {v:.4g} |" for k, v in headline.items()]
    return "\n".join(["Headline numbers (the first table's columns; every number is among the metrics):", "",
                      "| metric | value |", "|---|---:|", *rows])


def now_ms() -> int:
    """The current time as MLflow stores it (milliseconds since the epoch)."""
    return int(time.time() * 1000)


class Tracker:
    """MLflow runs of one invocation; every method is a no-op when tracking is disabled. A full disk under the store
    or its artifacts is one NoSpace error naming the path."""

    def __init__(self, *, uri: str, experiment: str, artifact_root: Path, enabled: bool = True) -> None:
        self.uri, self.experiment, self.artifact_root, self.enabled = uri, experiment, artifact_root, enabled
        self.open_parents: list[str] = []
        self.open_units: list[str] = []
        self._client: Any = None
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str | None:
        """The experiment's id once the store is open (None before, or with tracking off)."""
        return self._experiment_id

    def open(self) -> None:
        """Create the store and experiment when missing, and mark runs left RUNNING by killed processes KILLED."""
        if not self.enabled or self._client is not None:
            return
        from mlflow.exceptions import MlflowException

        try:
            with store_faults(self.uri):
                self._experiment_id = open_experiment(self.uri, self.experiment, self.artifact_root)
        except MlflowException as exc:  # a server that answers, but not as a tracking store should
            raise CapsbenchError(f"tracking.uri={self.uri}: the store refused to open experiment "
                                 f"{self.experiment!r} ({str(exc)[:300]}); fix tracking.uri= or set "
                                 "tracking.enabled=false") from None
        self._client = mlflow_client(self.uri)
        with self._writes(), store_faults(self.uri):
            recover_stale_runs(self.uri, self._experiment_id, process_tags()["host"])

    def start_parent(self, name: str, params: dict[str, Any], tags: dict[str, str], config_yaml: str, *,
                     parent: str | None = None) -> str | None:
        """A run of the invocation (a section's, holding its units; or a finish step's, holding sections: `parent`)."""
        if not self.enabled:
            return None
        self.open()
        above = {"mlflow.parentRunId": parent} if parent else {}
        with self._writes():
            run = self._client.create_run(self._experiment_id, run_name=name,
                                          tags={**tags, **process_tags(), **above})
            run_id = run.info.run_id
            self.open_parents.append(run_id)
            self._batch(run_id, params=params)
            self._client.log_text(run_id, config_yaml, "config.yaml")
        return run_id

    def start_unit(self, parent_id: str | None, spec: UnitIdentity, tags: dict[str, str], *, reused: bool,
                   start_ms: int | None = None, host: str = "") -> str | None:
        """The unit's nested run, RUNNING from `start_ms` (when the unit started, wherever it runs) on."""
        if not self.enabled:
            return None
        with self._writes():
            run = self._client.create_run(
                self._experiment_id,
                start_time=start_ms or now_ms(),
                run_name=spec.name.split("/", 1)[1],
                tags={**tags, **process_tags(), "mlflow.parentRunId": parent_id, "model": spec.model,
                      "seed": str(spec.seed), "unit.key": spec.key, "unit.reused": str(reused).lower(),
                      **({"unit.host": host} if host else {})},
            )
            run_id = run.info.run_id
            self.open_units.append(run_id)
            params = {"model": spec.model, "dataset": spec.dataset, "seed": spec.seed, **spec.variant,
                      "threads": spec.config.get("threads")}
            self._batch(run_id, params=params)
        return run_id

    def log_epoch(self, run_id: str | None, row: dict[str, Any], at_ms: int | None = None) -> None:
        """One epoch of a unit's training (epoch, train_loss, train_accuracy, val_accuracy, lr) as it happens."""
        if not self.enabled or run_id is None:
            return
        with self._writes():
            self._batch(run_id, metrics=curve_metrics([row], at_ms or now_ms()))

    def end_unit(self, run_id: str | None, result: LoggedUnit, columns: Iterable[str], *,
                 streamed: Collection[int] = (), headline: dict[str, float] | None = None) -> None:
        """The unit's records (with n and intervals), its `headline` numbers (a few named metrics beside them),
        settings, curves not streamed yet, figures and checkpoint, then FINISHED or FAILED (with the error as a tag) at
        the true end time."""
        if not self.enabled or run_id is None:
            return
        now = now_ms()
        with self._writes():
            tags = {**result.machine, **({"unit.host": result.host} if result.host else {})}  # where the unit ran
            if result.error:
                tags["error"] = result.error[:5000]
            for key, value in tags.items():
                self._client.set_tag(run_id, key, value)
            if headline:  # at the top of the run's page, and first among its metrics
                self._client.set_tag(run_id, NOTE, headline_note(headline))
            metrics = [(k, float(v), now, 0) for k, v in (headline or {}).items()]
            metrics += record_metrics(result.records, columns, now)
            metrics += [(k, float(v), now, 0) for k, v in result.metrics.items()]
            metrics += curve_metrics(result.curves, now, skip=streamed)
            self._batch(run_id, params=result.params, metrics=metrics)
            for path in result.figures:
                self._client.log_artifact(run_id, path, "figures")
            if result.status == "done":
                self._log_checkpoint(run_id, result.params)
            self._client.set_terminated(run_id, status="FINISHED" if result.status == "done" else "FAILED",
                                        end_time=now)
        self.open_units.remove(run_id)

    def log_unit(self, parent_id: str | None, result: LoggedUnit, tags: dict[str, str], columns: Iterable[str], *,
                 reused: bool, headline: dict[str, float] | None = None) -> None:
        """A unit's nested run created and ended in one go (a unit an earlier run finished: nothing ran now)."""
        run_id = self.start_unit(parent_id, result.spec, tags, reused=reused)
        self.end_unit(run_id, result, columns, headline=headline)

    def finish_parent(self, run_id: str | None, metrics: dict[str, float], artifacts: Iterable[Path], *,
                      failed: str | None = None) -> None:
        """Headline metrics and the suite's files (records.csv's sha256 as a tag, checked by `report`), then FINISHED,
        or FAILED with `failed` as its error tag when some of its units failed."""
        if not self.enabled or run_id is None:
            return
        now = now_ms()
        with self._writes():
            self._batch(run_id, metrics=[(k, v, now, 0) for k, v in metrics.items()])
            for path in artifacts:
                folder = path.parent.name if path.parent.name in ("figures", "model-cards") else None
                self._client.log_artifact(run_id, str(path), folder)
                if path.name == "records.csv":
                    self._client.set_tag(run_id, "records.sha256", hashlib.sha256(path.read_bytes()).hexdigest())
            if failed:
                self._client.set_tag(run_id, "error", failed[:5000])
            self._client.set_terminated(run_id, status="FAILED" if failed else "FINISHED", end_time=now)
        self.open_parents.remove(run_id)

    def end_open(self, status: str, error: str | None = None) -> str | None:
        """End every run still open, nested ones first: KILLED on Ctrl-C or SIGTERM, FAILED (with the error as a tag)
        on an exception; quietly and within seconds (capsbench.tracking.store.end_runs). What it did, in words (None
        with tracking off): a store that stayed locked leaves its runs to the next run in it, and the words say so."""
        if not self.enabled:
            return None
        runs = [*self.open_units, *self.open_parents]
        self.open_units.clear()
        self.open_parents.clear()
        if not runs:
            return "no MLflow run was open"
        left, why = end_runs(self.uri, runs, status, error)
        if not left:
            return f"{len(runs)} open MLflow run(s) marked {status}"
        log.log(logging.DEBUG if status == "KILLED" else logging.WARNING, "could not mark runs %s %s: %s",
                ", ".join(left), status, why)  # after a signal, the one line the command ends with says it
        return (f"{len(left)} of {len(runs)} open MLflow run(s) could not be marked {status} now ({why}); the next "
                "run in this store marks them KILLED")

    def _log_checkpoint(self, run_id: str, params: dict[str, Any]) -> None:
        """The unit's checkpoint as an artifact, once per experiment: a run whose checkpoint another run already holds
        gets a `checkpoint.run` tag naming that run instead of a second copy."""
        key, path = params.get("checkpoint.key"), params.get("checkpoint.path")
        if not key or not path or not Path(path).is_file():  # nothing trained, or trained on a host without this disk
            return
        holders = self._client.search_runs([self._experiment_id], filter_string=f"tags.`checkpoint.logged` = '{key}'",
                                           max_results=1)
        if holders:
            self._client.set_tag(run_id, "checkpoint.run", holders[0].info.run_id)
            return
        self._client.log_artifact(run_id, str(path), CHECKPOINT_DIR)
        self._client.set_tag(run_id, "checkpoint.logged", key)
        self._client.set_tag(run_id, "checkpoint.run", run_id)

    @contextmanager
    def _writes(self) -> Iterator[None]:
        """A full disk while MLflow writes becomes NoSpace naming the file (the store, or an artifact's path)."""
        from mlflow.exceptions import MlflowException
        from sqlalchemy.exc import SQLAlchemyError

        try:
            yield
        except (OSError, MlflowException, SQLAlchemyError) as exc:
            if is_no_space(exc):
                raise NoSpace(getattr(exc, "filename", None) or sqlite_path(self.uri) or self.artifact_root) from exc
            db = sqlite_path(self.uri)
            if db is not None and (store_moved(exc) or not db.is_file()):
                raise RunFailed(f"the MLflow store {db} was deleted or moved while this run wrote to it (its output "
                                "folder removed?), so nothing more can be logged; run the same command again: it "
                                "measures what is missing and reuses the checkpoints still in the cache") from exc
            raise

    def _batch(self, run_id: str, *, params: dict[str, Any] | None = None, metrics: list[Metric] | None = None) -> None:
        from mlflow.entities import Metric as MlflowMetric
        from mlflow.entities import Param

        items = [Param(k, _param(v)) for k, v in (params or {}).items()]
        for i in range(0, len(items), PARAM_BATCH):
            self._client.log_batch(run_id, params=items[i : i + PARAM_BATCH])
        values = [MlflowMetric(k, v, t, s) for k, v, t, s in (metrics or []) if math.isfinite(v)]
        for i in range(0, len(values), BATCH):
            self._client.log_batch(run_id, metrics=values[i : i + BATCH])


def _param(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 6000 else text[:5997] + "..."


__all__ = ["CURVES", "LoggedUnit", "Tracker", "UnitIdentity", "metric_key", "now_ms"]
