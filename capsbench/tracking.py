"""MLflow logging (one parent run per invocation, one nested run per (model, dataset, seed)) and reading runs
back for reports. The only module that imports mlflow."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from capsbench.collect import Invocation
from capsbench.errors import CapsbenchError

log = logging.getLogger(__name__)

PACKAGES = ("capsbench", "torch", "torchvision", "torchattacks", "mlflow", "fvcore", "numpy")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists become their string form."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            flat.update(flatten(v, key))
        else:
            flat[key] = v
    return flat


def environment_tags(device: str) -> dict[str, str]:
    """Git commit, package versions, device name: what a reader needs to trust or reproduce a number."""
    tags = {f"version.{p}": _version(p) for p in PACKAGES}
    tags["version.python"] = platform.python_version()
    tags["git.commit"] = _git_commit()
    if device.startswith("cuda"):
        tags["device.name"] = torch.cuda.get_device_name(torch.device(device))
        tags["device.tf32"] = str(torch.backends.cuda.matmul.allow_tf32)
    else:
        tags["device.name"] = f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    tags["device"] = device
    return tags


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


class Tracker:
    """Context manager around the parent run; `child()` opens a nested run. A no-op when disabled."""

    def __init__(self, *, uri: str, experiment: str, artifact_root: Path, enabled: bool = True) -> None:
        self.enabled = enabled
        self.uri, self.experiment, self.artifact_root = uri, experiment, artifact_root
        self.parent_id: str | None = None

    @contextmanager
    def parent(self, run_name: str, params: dict[str, Any], tags: dict[str, str], config_yaml: str) -> Iterator["Tracker"]:
        if not self.enabled:
            yield self
            return
        import mlflow

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        with store_lock(self.uri):  # one process creates and migrates a new store and the experiment; others wait
            mlflow.set_tracking_uri(self.uri)
            if mlflow.get_experiment_by_name(self.experiment) is None:
                # Artifacts beside the output, not in ./mlruns of whatever directory the user is in.
                mlflow.create_experiment(self.experiment, artifact_location=self.artifact_root.resolve().as_uri())
        mlflow.set_experiment(self.experiment)
        with _run_status(mlflow, mlflow.start_run(run_name=run_name, tags=tags)) as run:
            self.parent_id = run.info.run_id
            mlflow.log_params({k: _param(v) for k, v in params.items()})
            mlflow.log_text(config_yaml, "config.yaml")
            yield self

    @contextmanager
    def child(self, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> Iterator["ChildRun"]:
        if not self.enabled:
            yield ChildRun(None)
            return
        import mlflow

        with _run_status(mlflow, mlflow.start_run(run_name=run_name, nested=True, tags=tags)) as run:
            mlflow.log_params({k: _param(v) for k, v in params.items()})
            yield ChildRun(run.info.run_id)

    def log_artifacts(self, paths: list[Path]) -> None:
        if not self.enabled:
            return
        import mlflow

        for path in paths:
            mlflow.log_artifact(str(path))


class ChildRun:
    """A nested run: metrics from tidy records (sweep records use the sweep index as the MLflow step)."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id

    def log_records(self, records: list[dict[str, Any]], sweep_columns: tuple[str, ...]) -> None:
        """Each record becomes a metric value; a metric's sweep points become its steps 0, 1, ...,
        and the param `steps.<metric>` says which sweep values each step stands for."""
        if self.run_id is None:
            return
        import mlflow

        labels: dict[str, list[str]] = defaultdict(list)
        for rec in records:
            step = len(labels[rec["metric"]])
            labels[rec["metric"]].append(", ".join(f"{c}={rec[c]}" for c in sweep_columns if rec.get(c) is not None))
            mlflow.log_metric(rec["metric"], float(rec["value"]), step=step)
        for metric, steps in labels.items():
            if any(steps):
                mlflow.log_param(f"steps.{metric}", _param("; ".join(f"{i}: {s}" for i, s in enumerate(steps))))

    def log_artifacts(self, paths: list[Path]) -> None:
        if self.run_id is None:
            return
        import mlflow

        for path in paths:
            mlflow.log_artifact(str(path), artifact_path="figures")

    def log_params(self, params: dict[str, Any]) -> None:
        if self.run_id is None:
            return
        import mlflow

        mlflow.log_params({k: _param(v) for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float]) -> None:
        if self.run_id is None:
            return
        import mlflow

        mlflow.log_metrics(metrics)


def _param(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 6000 else text[:5997] + "..."


@contextmanager
def _run_status(mlflow: Any, active_run: Any) -> Iterator[Any]:
    """End the run FINISHED on success, KILLED on Ctrl-C, FAILED on any other exception, then re-raise."""
    try:
        yield active_run
    except KeyboardInterrupt:
        mlflow.end_run(status="KILLED")
        raise
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    mlflow.end_run(status="FINISHED")


def read_invocations(uri: str, experiment: str) -> list[Invocation]:
    """Every FINISHED parent run of `capsbench run` in the experiment, with its nested runs' model args.

    Killed or failed invocations are skipped: their records are incomplete and were never tabulated.
    """
    from mlflow.tracking import MlflowClient

    _check_store(uri)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise CapsbenchError(f"no MLflow experiment {experiment!r} at {uri}; run `capsbench run` first or set tracking.experiment=")
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
            c.data.params["model"]: {k.removeprefix("model_args."): v for k, v in c.data.params.items() if k.startswith("model_args.")}
            for c in children[run.info.run_id] if "model" in c.data.params
        }
        out.append(Invocation(
            run_id=run.info.run_id, start=datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc),
            suite=tags["suite"], budget=tags.get("budget", "unknown"), version=tags.get("version.capsbench", "unknown"),
            params=dict(run.data.params), model_args=model_args,
        ))
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
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="records.csv", dst_path=tmp, tracking_uri=uri)
            return pd.read_csv(path)
    finally:
        if quiet:
            del os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name]


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive fcntl lock on <db>.lock beside a SQLite store, held while MLflow creates or migrates its schema:
    two invocations started at once on a new output directory would otherwise both run the migrations, and one
    would fail. Other stores (servers, databases) need no lock from us."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(db.with_name(db.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _check_store(uri: str) -> None:
    """A missing SQLite file would be created empty by MLflow; say where the runs were expected instead."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise CapsbenchError(f"no MLflow store at {uri}; run `capsbench run` first, or point tracking.uri= "
                             "(or output_dir=) at the store your runs wrote to")
