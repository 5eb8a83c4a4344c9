"""Writing MLflow runs from the driver alone: one parent run per suite of an invocation (its config, headline metrics,
tables and figures) and one nested run per unit (its settings, records as named metrics, training curves as steps,
figures), each logged in batches as the unit's result arrives, so the store is never written concurrently."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from capsbench.tracking.environment import process_tags
from capsbench.tracking.store import open_experiment, recover_stale_runs

BATCH = 900  # MLflow accepts up to 1000 metrics (and 100 params) per log_batch call
PARAM_BATCH = 90
CURVES = {
    "train_loss": "train/loss",
    "train_accuracy": "train/accuracy",
    "val_accuracy": "val/accuracy",
    "lr": "train/lr",
}
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /]")


class UnitIdentity(Protocol):
    """What the writer reads of a unit's spec (capsbench.run.units.UnitSpec)."""

    name: str
    model: str
    seed: int
    dataset: str
    variant: dict[str, Any]


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


def metric_key(record: dict[str, Any], columns: Iterable[str]) -> str:
    """The MLflow name of a record: its metric and sweep coordinates, e.g. robust_accuracy.pgd.eps_0.1 (text values
    as they are, numbers as <column>_<value>), with anything MLflow does not accept replaced by '_'."""
    parts = [record["metric"]]
    for col in columns:
        value = record.get(col)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        parts.append(
            f"{col}_{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
        )
    return _UNSAFE.sub("_", ".".join(parts))


class Tracker:
    """MLflow runs of one invocation; every method is a no-op when tracking is disabled."""

    def __init__(self, *, uri: str, experiment: str, artifact_root: Path, enabled: bool = True) -> None:
        self.uri, self.experiment, self.artifact_root, self.enabled = uri, experiment, artifact_root, enabled
        self.open_parents: list[str] = []
        self._client: Any = None
        self._experiment_id: str | None = None

    def open(self) -> None:
        """Create the store and experiment when missing, and mark runs left RUNNING by killed processes KILLED."""
        if not self.enabled or self._client is not None:
            return
        from mlflow.tracking import MlflowClient

        self._experiment_id = open_experiment(self.uri, self.experiment, self.artifact_root)
        self._client = MlflowClient(self.uri)
        recover_stale_runs(self.uri, self._experiment_id, process_tags()["host"])

    def start_parent(self, name: str, params: dict[str, Any], tags: dict[str, str], config_yaml: str) -> str | None:
        if not self.enabled:
            return None
        self.open()
        run = self._client.create_run(self._experiment_id, run_name=name, tags={**tags, **process_tags()})
        run_id = run.info.run_id
        self.open_parents.append(run_id)
        self._batch(run_id, params=params)
        self._client.log_text(run_id, config_yaml, "config.yaml")
        return run_id

    def log_unit(
        self, parent_id: str | None, result: LoggedUnit, tags: dict[str, str], columns: Iterable[str], *, reused: bool
    ) -> None:
        """One nested run for a finished (or failed) unit, created, filled and ended in one go."""
        if not self.enabled:
            return
        spec = result.spec
        run = self._client.create_run(
            self._experiment_id,
            run_name=spec.name.split("/", 1)[1],
            tags={
                **tags,
                **result.machine,  # where the unit ran, which may not be the driver's machine
                "mlflow.parentRunId": parent_id,
                "model": spec.model,
                "seed": str(spec.seed),
                "unit.key": result.key,
                "unit.reused": str(reused).lower(),
                "unit.host": result.host,
                **({"error": result.error[:5000]} if result.error else {}),
            },
        )
        run_id = run.info.run_id
        params = {"model": spec.model, "dataset": spec.dataset, "seed": spec.seed, **spec.variant, **result.params}
        now = int(time.time() * 1000)
        metrics = [(metric_key(r, columns), float(r["value"]), now, 0) for r in result.records]
        metrics += [(k, float(v), now, 0) for k, v in result.metrics.items()]
        metrics += [
            (name, float(h[field]), now, int(h["epoch"]))
            for h in result.curves
            for field, name in CURVES.items()
            if h.get(field) is not None
        ]
        self._batch(run_id, params=params, metrics=metrics)
        for path in result.figures:
            self._client.log_artifact(run_id, path, "figures")
        self._client.set_terminated(run_id, status="FINISHED" if result.status == "done" else "FAILED")

    def finish_parent(self, run_id: str | None, metrics: dict[str, float], artifacts: Iterable[Path]) -> None:
        """Headline metrics and the suite's files, then FINISHED."""
        if not self.enabled or run_id is None:
            return
        now = int(time.time() * 1000)
        self._batch(run_id, metrics=[(k, v, now, 0) for k, v in metrics.items()])
        for path in artifacts:
            self._client.log_artifact(run_id, str(path), "figures" if path.parent.name == "figures" else None)
        self._client.set_terminated(run_id, status="FINISHED")
        self.open_parents.remove(run_id)

    def end_open(self, status: str, error: str | None = None) -> None:
        """End every parent still open: KILLED on Ctrl-C, FAILED (with the error as a tag) on an exception."""
        for run_id in list(self.open_parents):
            if error:
                self._client.set_tag(run_id, "error", error[:5000])
            self._client.set_terminated(run_id, status=status)
            self.open_parents.remove(run_id)

    def _batch(
        self,
        run_id: str,
        *,
        params: dict[str, Any] | None = None,
        metrics: list[tuple[str, float, int, int]] | None = None,
    ) -> None:
        from mlflow.entities import Metric, Param

        items = [Param(k, _param(v)) for k, v in (params or {}).items()]
        for i in range(0, len(items), PARAM_BATCH):
            self._client.log_batch(run_id, params=items[i : i + PARAM_BATCH])
        values = [Metric(k, v, t, s) for k, v, t, s in (metrics or []) if math.isfinite(v)]
        for i in range(0, len(values), BATCH):
            self._client.log_batch(run_id, metrics=values[i : i + BATCH])


def _param(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 6000 else text[:5997] + "..."
