"""An output folder copied or moved whole (`cp -r`, `mv`, an archive unpacked elsewhere) stays self-contained: MLflow
keeps absolute artifact locations in its store, so a SQLite store whose experiment still points at the folder it came
from, while the artifacts beside the store hold that experiment's runs, is told where its artifacts are now. `run`
rewrites those locations in the store (its new runs then write beside it); `report` reads through them unchanged."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote, urlsplit

from capsbench.util.uris import sqlite_path

log = logging.getLogger(__name__)

ARTIFACTS = "mlartifacts"  # the artifact folder beside the store, in every output folder (capsbench.run.driver)
SHOWN_RUNS = 20  # runs whose folders are looked for beside the store


def moved_artifacts(uri: str, experiment_id: str) -> tuple[str, str] | None:
    """(the artifact location the store names, the folder beside the store as a URI) when the experiment's artifacts
    were copied or moved with the store; None when they are where the store says, or not beside it (a store shared
    by several output folders keeps each run's artifacts in its own output folder)."""
    db = sqlite_path(uri)
    if db is None or not db.is_file():
        return None
    beside = db.resolve().parent / ARTIFACTS
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT artifact_location FROM experiments WHERE experiment_id = ?",
                           (int(experiment_id),)).fetchone()
        runs = [r[0] for r in conn.execute("SELECT run_uuid FROM runs WHERE experiment_id = ? LIMIT ?",
                                           (int(experiment_id), SHOWN_RUNS))]
    location = row[0].rstrip("/") if row and row[0] else ""
    if urlsplit(location).scheme != "file":
        return None
    named = Path(unquote(urlsplit(location).path))
    if named == beside or named.name != ARTIFACTS or not any((beside / run).is_dir() for run in runs):
        return None
    return location, beside.as_uri()


def relocate(uri: str, experiment_id: str) -> None:
    """Point the experiment and its runs at the artifacts beside the store when the output folder was copied or moved
    (call under capsbench.tracking.store.store_lock): its next runs write inside it, and the MLflow UI reads them
    there."""
    moved = moved_artifacts(uri, experiment_id)
    if moved is None:
        return
    old, new = moved
    db = sqlite_path(uri)
    with closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        conn.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (new, int(experiment_id)))
        conn.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? AND "
                     "substr(artifact_uri, 1, ?) = ?", (new, len(old) + 1, int(experiment_id), len(old) + 1, old + "/"))
    log.info("the output folder of %s was copied or moved from %s: its runs' artifacts are now read and written beside "
             "it, in %s", db, old, new)


def run_artifacts(uri: str, experiment_id: str, artifact_uri: str) -> str:
    """A run's artifact URI as the store names it, or where it lies now when the output folder was copied or moved."""
    moved = moved_artifacts(uri, experiment_id)
    if moved is None or not artifact_uri.startswith(moved[0] + "/"):
        return artifact_uri
    return moved[1] + artifact_uri.removeprefix(moved[0])
