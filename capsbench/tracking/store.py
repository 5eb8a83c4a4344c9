"""The MLflow store: created and migrated once under a lock, the experiment marked as a model-development one (so the
UI opens on its runs, not on the GenAI views), and runs left RUNNING by a killed process marked KILLED."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsbench.errors import CapsbenchError
from capsbench.tracking.environment import process_alive

log = logging.getLogger(__name__)

EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the UI's "machine learning" experiment type


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive fcntl lock on <db>.lock beside a SQLite store, held while MLflow creates or migrates its schema:
    two invocations started at once on a new output directory would otherwise both run the migrations, and one
    would fail. Other stores (servers, databases) need no lock from us."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl  # POSIX only: needed only where a SQLite store is locked

    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(db.with_name(db.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def open_experiment(uri: str, experiment: str, artifact_root: Path) -> str:
    """The experiment's id, creating the store and the experiment (artifacts beside the outputs) when missing."""
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with store_lock(uri):  # one process creates and migrates a new store and the experiment; others wait
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(
            experiment, artifact_location=artifact_root.resolve().as_uri())
        if exp is None or exp.tags.get(EXPERIMENT_KIND[0]) is None:
            client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
    return exp_id


def recover_stale_runs(uri: str, experiment_id: str, host: str) -> list[str]:
    """Runs of this host still RUNNING whose writing process is gone (SIGKILL, power loss): marked KILLED. Runs of
    other hosts cannot be checked from here and are left alone. Returns the ids marked."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    stale = []
    for run in client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.host = '{host}'"
    ):
        pid = run.data.tags.get("pid", "")
        if pid.isdigit() and not process_alive(int(pid), run.data.tags.get("process.start")):
            client.set_tag(
                run.info.run_id, "capsbench.ended", f"process {pid} on {host} was gone when a later run started"
            )
            client.set_terminated(run.info.run_id, status="KILLED")
            stale.append(run.info.run_id)
    if stale:
        log.info("marked %d run(s) left RUNNING by a killed process as KILLED: %s", len(stale), ", ".join(stale))
    return stale


def check_store(uri: str) -> None:
    """A missing SQLite file would be created empty by MLflow; say where the runs were expected instead."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise CapsbenchError(
            f"no MLflow store at {uri}; run `capsbench run` first, or point tracking.uri= "
            "(or output_dir=) at the store your runs wrote to"
        )
