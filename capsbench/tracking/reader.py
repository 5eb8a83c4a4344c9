"""Reading tracked invocations back for `capsbench report`: finished parent runs, their nested runs' model arguments,
and the tidy records each logged as an artifact."""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from capsbench.errors import CapsbenchError
from capsbench.tracking.store import check_store


@dataclass(frozen=True)
class Invocation:
    """One finished `capsbench run` as read back from MLflow: its parent run and its nested runs' model args."""

    run_id: str
    start: datetime  # UTC
    suite: str
    budget: str
    version: str  # capsbench version that produced it
    params: dict[str, str]  # the parent run's flattened config
    model_args: dict[str, dict[str, str]] = field(default_factory=dict)  # model -> constructor args (nested runs)

    @property
    def dataset(self) -> str:
        return self.params.get("dataset", "")


def read_invocations(uri: str, experiment: str) -> list[Invocation]:
    """Every FINISHED parent run of `capsbench run` in the experiment, with its nested runs' model args.

    Killed or failed invocations are skipped: their records are incomplete and were never tabulated.
    """
    from mlflow.tracking import MlflowClient

    check_store(uri)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise CapsbenchError(
            f"no MLflow experiment {experiment!r} at {uri}; run `capsbench run` first or set tracking.experiment="
        )
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    children: dict[str, list[Any]] = defaultdict(list)
    for run in runs:
        if "mlflow.parentRunId" in run.data.tags:
            children[run.data.tags["mlflow.parentRunId"]].append(run)
    out = []
    for run in runs:
        tags = run.data.tags
        if "mlflow.parentRunId" in tags or "suite" not in tags or run.info.status != "FINISHED":
            continue
        model_args = {
            c.data.params["model"]: {
                k.removeprefix("model_args."): v for k, v in c.data.params.items() if k.startswith("model_args.")
            }
            for c in children[run.info.run_id]
            if "model" in c.data.params
        }
        out.append(
            Invocation(
                run_id=run.info.run_id,
                start=datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc),
                suite=tags["suite"],
                budget=tags.get("budget", "unknown"),
                version=tags.get("version.capsbench", "unknown"),
                params=dict(run.data.params),
                model_args=model_args,
            )
        )
    return out


def read_records(uri: str, run_id: str) -> pd.DataFrame:
    """The tidy records.csv an invocation logged as an artifact of its parent run."""
    import mlflow
    from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR

    quiet = MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name not in os.environ
    if quiet:  # one small file: no progress bar in the report's output
        os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name] = "false"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path="records.csv", dst_path=tmp, tracking_uri=uri
            )
            return pd.read_csv(path)
    finally:
        if quiet:
            del os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name]
