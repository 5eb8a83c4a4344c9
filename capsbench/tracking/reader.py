"""Reading tracked invocations back for `capsbench report`: parent runs that tabulated records, their finished nested
runs' model arguments, the tidy records each logged as an artifact (checked before use), and a unit's checkpoint."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from capsbench.errors import CapsbenchError
from capsbench.tracking.relocation import run_artifacts
from capsbench.tracking.store import check_store, folders_from_paths, mlflow_client, store_faults
from capsbench.util.stats import decode_outcomes, decode_values
from capsbench.util.uris import sqlite_path

REQUIRED_COLUMNS = ("suite", "model", "dataset", "seed", "metric", "value")
UNTAGGED = "commit "  # the code of a run logged without a code.hash tag: its git commit stands in
MODEL_CODE = "code.model."  # + alias: the tag of an external model's source hash (written by the driver)


class UnreadableRecords(Exception):
    """A run's records.csv artifact is missing, truncated or altered; the message says which and why."""


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
    code: str = "unknown"  # hash of the package's code (tag code.hash), or UNTAGGED + its git commit without one
    commit: str = "unknown"  # git commit, "+dirty" when the tree had uncommitted changes
    records_sha256: str | None = None  # of its records.csv artifact, when the run recorded it
    model_code: dict[str, str] = field(default_factory=dict)  # external model -> hash of its source (code.model.*)

    @property
    def dataset(self) -> str:
        return self.params.get("dataset", "")


def read_invocations(uri: str, experiment: str) -> list[Invocation]:
    """Every parent run of `capsbench run` in the experiment that tabulated its records: FINISHED ones, and FAILED ones
    whose finished units were tabulated (they carry records.sha256), with their FINISHED nested runs' model args.

    Killed invocations, and failed ones that tabulated nothing, are skipped; a failed unit never contributes.
    """
    check_store(uri)
    with store_faults(uri):
        runs = _every_run(uri, experiment)
    children: dict[str, list[Any]] = defaultdict(list)
    for run in runs:
        if "mlflow.parentRunId" in run.data.tags:
            children[run.data.tags["mlflow.parentRunId"]].append(run)
    out = []
    for run in runs:
        tags = run.data.tags
        if not _invocation(run) or not _tabulated(run):
            continue
        model_args = {
            c.data.params["model"]: {
                k.removeprefix("model_args."): v for k, v in c.data.params.items() if k.startswith("model_args.")
            }
            for c in children[run.info.run_id]
            if "model" in c.data.params and c.info.status == "FINISHED"
        }
        commit = tags.get("git.commit", "unknown") + ("+dirty" if tags.get("git.dirty") == "true" else "")
        out.append(
            Invocation(
                run_id=run.info.run_id,
                start=datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc),
                suite=tags["suite"],
                budget=tags.get("budget", "unknown"),
                version=tags.get("version.capsbench", "unknown"),
                params=dict(run.data.params),
                model_args=model_args,
                code=tags.get("code.hash", f"{UNTAGGED}{commit}"),
                commit=commit,
                records_sha256=tags.get("records.sha256"),
                model_code={k.removeprefix(MODEL_CODE): v for k, v in tags.items() if k.startswith(MODEL_CODE)},
            )
        )
    return out


def untabulated_runs(uri: str, experiment: str) -> list[str]:
    """The parent runs of `capsbench run` that tabulated nothing, as "suite/budget/dataset (STATUS)": killed or
    interrupted ones (rerunning their command resumes them from their finished units), ones still running, and
    failed ones whose units all failed."""
    with store_faults(uri):
        runs = _every_run(uri, experiment)
    return [f"{run.data.tags['suite']}/{run.data.tags.get('budget', 'unknown')}/{run.data.params.get('dataset', '')} "
            f"({run.info.status})" for run in runs if _invocation(run) and not _tabulated(run)]


def _invocation(run: Any) -> bool:
    """A parent run of `capsbench run` (a nested run is one unit)."""
    return "mlflow.parentRunId" not in run.data.tags and "suite" in run.data.tags


def _tabulated(run: Any) -> bool:
    """Its records were tabulated: it finished, or it failed after tabulating the units that finished."""
    return run.info.status == "FINISHED" or (run.info.status == "FAILED" and "records.sha256" in run.data.tags)


def _every_run(uri: str, experiment: str) -> list[Any]:
    """Every run of the experiment, parent and nested."""
    client = mlflow_client(uri)
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
            return runs


@contextmanager
def _quiet_downloads() -> Iterator[None]:
    """No MLflow progress bar for the small files a report downloads (unless the user set it)."""
    from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR

    name = MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name
    quiet = name not in os.environ
    if quiet:
        os.environ[name] = "false"
    try:
        yield
    finally:
        if quiet:
            del os.environ[name]


def read_records(uri: str, run_id: str, sha256: str | None = None) -> pd.DataFrame:
    """The tidy records.csv an invocation logged as an artifact of its parent run, checked against its recorded
    sha256 (when given) and for the columns and per-image outcomes the tables read. UnreadableRecords otherwise."""
    from mlflow.exceptions import MlflowException

    folders_from_paths()
    with _quiet_downloads(), tempfile.TemporaryDirectory() as tmp:
        try:
            path = _download(uri, run_id, "records.csv", tmp)
            data = path.read_bytes()
        except (MlflowException, OSError) as exc:
            raise UnreadableRecords(f"its records.csv artifact cannot be read ({_first_line(exc)})") from None
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise UnreadableRecords("its records.csv artifact differs from the one logged (truncated or edited: its "
                                    "sha256 does not match the run's records.sha256 tag)")
        try:
            frame = pd.read_csv(path)
            _check_records(frame)
        except ValueError as exc:  # pandas' parser errors, and undecodable outcomes, are ValueErrors
            raise UnreadableRecords(f"its records.csv artifact is malformed ({_first_line(exc)})") from None
    return frame


def read_config(uri: str, run_id: str) -> dict[str, Any]:
    """The resolved config an invocation logged as its parent run's config.yaml artifact, typed as the run used it
    (null, numbers, lists and nested settings; MLflow's params hold only their text). CapsbenchError when it is absent
    or unreadable."""
    import yaml
    from mlflow.exceptions import MlflowException

    folders_from_paths()
    with _quiet_downloads(), tempfile.TemporaryDirectory() as tmp:
        try:
            path = _download(uri, run_id, "config.yaml", tmp)
            config = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (MlflowException, OSError, yaml.YAMLError) as exc:
            raise CapsbenchError(f"run {run_id}: its config.yaml artifact cannot be read ({_first_line(exc)}); "
                                 "rerun its command, or leave it out with since=/until=") from None
    if not isinstance(config, dict):
        raise CapsbenchError(f"run {run_id}: its config.yaml artifact holds no settings; rerun its command")
    return config


def _download(uri: str, run_id: str, artifact_path: str, dst: str) -> Path:
    """One artifact of a run, downloaded into `dst`: from where the store says, or, for a SQLite store whose output
    folder was copied or moved, from beside the store (capsbench.tracking.relocation)."""
    import mlflow

    if sqlite_path(uri) is not None:
        info = mlflow_client(uri).get_run(run_id).info
        here = run_artifacts(uri, info.experiment_id, info.artifact_uri)
        if here != info.artifact_uri:
            return Path(mlflow.artifacts.download_artifacts(artifact_uri=f"{here}/{artifact_path}", dst_path=dst))
    return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_path, dst_path=dst,
                                                    tracking_uri=uri))


def _check_records(frame: pd.DataFrame) -> None:
    """The columns every record has, numeric values, and per-image outcomes (and values) that decode to n images."""
    absent = [c for c in REQUIRED_COLUMNS if c not in frame]
    if absent:
        raise ValueError(f"no column {', '.join(absent)}")
    if frame["value"].isna().any() or not pd.api.types.is_numeric_dtype(frame["value"]):
        raise ValueError("a record without a numeric value")
    for column, decode in (("outcomes", decode_outcomes), ("per_image", decode_values)):
        if column in frame:
            for text, n in zip(frame[column], frame.get("n", pd.Series(index=frame.index, dtype=float))):
                if isinstance(text, str):
                    decode(text, int(float(n)))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def download_checkpoint(uri: str, run_id: str, dst: str | Path) -> Path:
    """The checkpoint file of a unit's nested run, downloaded into `dst` from the run that holds it (a run whose
    checkpoint another run logged first names that run in its `checkpoint.run` tag). Load it with torch.load and
    build the model from its meta: create_model(run's model, **payload["meta"]["identity"]["model_args"])."""

    tags = mlflow_client(uri).get_run(run_id).data.tags
    holder = tags.get("checkpoint.run")
    if holder is None:
        raise CapsbenchError(f"run {run_id} has no checkpoint in {uri} (its suite trains nothing, or it was trained "
                             "on a host whose disk the driver could not read)")
    with _quiet_downloads():
        folder = _download(uri, holder, "checkpoint", str(dst))
    (path,) = sorted(folder.glob("*.ckpt"))
    return path
