"""The MLflow store: a new SQLite store built beside its final name and renamed into place once complete (under a lock),
a half-built one left by an older capsbench (provably without runs) moved aside and rebuilt, any other that cannot be
opened left as it is, the experiment marked as a model-development one
(so the UI opens on its runs, not on the GenAI views), and runs left RUNNING by a killed process marked KILLED."""

from __future__ import annotations

import gc
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from capsbench.errors import CapsbenchError, NoSpace, is_no_space
from capsbench.tracking.environment import process_alive
from capsbench.tracking.relocation import relocate
from capsbench.util.sqlite_file import recovery
from capsbench.util.uris import sqlite_path, sqlite_uri

log = logging.getLogger(__name__)

EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the UI's "machine learning" experiment type
LOCK_WAIT_S = 5.0  # how long ending runs retries a SQLite store another connection holds locked


def mlflow_client(uri: str) -> Any:
    """An MlflowClient for `uri` (after folders_from_paths)."""
    folders_from_paths()
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def folders_from_paths() -> None:
    """MLflow creates a SQLite store's folder from the URI's text (MLflow 3, mlflow.store.db.utils), so a folder whose
    name holds '?' or '%' (percent-encoded in the URI) got an empty twin named with the encoded text: it now creates the
    folder the URI names. Call before MLflow first opens a store."""
    import mlflow.store.db.utils as db_utils

    if hasattr(db_utils, "_make_parent_dirs_if_sqlite"):  # absent from MLflow versions that create no folder
        db_utils._make_parent_dirs_if_sqlite = _make_parent_dirs


def _make_parent_dirs(db_uri: str) -> None:
    db = sqlite_path(db_uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive fcntl lock on <db>.lock beside a SQLite store, held while MLflow creates or migrates its schema:
    two invocations started at once on a new output directory would otherwise both run the migrations, and one
    would fail. Other stores (servers, databases) need no lock from us."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    import fcntl  # POSIX only: needed only where a SQLite store is locked

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(db.with_name(db.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        if is_no_space(exc):
            raise NoSpace(db.with_name(db.name + ".lock")) from exc
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def open_experiment(uri: str, experiment: str, artifact_root: Path) -> str:
    """The experiment's id, creating the store and the experiment (artifacts beside the outputs) when missing."""
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # MLflow logs each failed write with its traceback before it raises; the exception itself still reaches capsbench,
    # which tells a full disk or a deleted store in one line (and passes anything else on whole)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    with store_lock(uri):  # one process creates and migrates a new store and the experiment; others wait
        ensure_store(uri, artifact_root)
        client = mlflow_client(uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(
            experiment, artifact_location=artifact_root.resolve().as_uri())
        relocate(uri, exp_id)  # an output folder copied or moved whole: its runs write inside it
        if exp is None or exp.tags.get(EXPERIMENT_KIND[0]) is None:
            client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
    return exp_id


def recover_stale_runs(uri: str, experiment_id: str, host: str) -> list[str]:
    """Runs of this host still RUNNING whose writing process is gone (SIGKILL, power loss): marked KILLED. Runs of
    other hosts cannot be checked from here and are left alone. Returns the ids marked."""
    client = mlflow_client(uri)
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


def end_runs(uri: str, run_ids: list[str], status: str, error: str | None = None) -> tuple[list[str], str]:
    """End runs with `status` at the present time (the error as their `error` tag): the ids left open and why. Quiet and
    bounded, for the clean-up after a fault or a signal: a SQLite store is written directly, retried for LOCK_WAIT_S
    while another connection holds it (MLflow's own writes wait 20 s each and log every failure with a traceback);
    other stores through the MLflow client. The caller lets go of the frames of a write that the fault cut short
    (traceback.clear_frames): its connection holds the store locked until then."""
    db = sqlite_path(uri)
    if db is None:
        return _end_with_client(uri, run_ids, status, error)
    now, deadline, collected = int(time.time() * 1000), time.monotonic() + LOCK_WAIT_S, False
    while True:
        try:
            with closing(sqlite3.connect(db, timeout=0.5, isolation_level=None)) as conn:
                conn.execute("BEGIN IMMEDIATE")
                for run_id in run_ids:
                    conn.execute("UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ? AND status = 'RUNNING'",
                                 (status, now, run_id))
                    if error:
                        conn.execute("INSERT OR REPLACE INTO tags (key, value, run_uuid) VALUES ('error', ?, ?)",
                                     (error[:5000], run_id))
                conn.execute("COMMIT")
            return [], ""
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or time.monotonic() > deadline:
                return run_ids, f"the store {db} stayed locked" if locked else str(exc)
            if not collected:  # a write cut short may hold its connection, and the lock, in a garbage cycle
                gc.collect()
                collected = True
            time.sleep(0.2)
        except sqlite3.DatabaseError as exc:
            return run_ids, str(exc)


def _end_with_client(uri: str, run_ids: list[str], status: str, error: str | None) -> tuple[list[str], str]:
    client, left, why = mlflow_client(uri), [], ""
    for run_id in run_ids:
        try:
            if error:
                client.set_tag(run_id, "error", error[:5000])
            client.set_terminated(run_id, status=status)
        except Exception as exc:  # noqa: BLE001 -- whatever a server answers while runs end must not replace the fault
            left.append(run_id)
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return left, why


def check_store(uri: str) -> None:
    """A missing SQLite file would be created by MLflow, and an empty one (a valid empty database to SQLite) filled with
    its tables: neither holds runs, so say where the runs were expected instead and leave the file alone."""
    db = sqlite_path(uri)
    if db is not None and (not db.exists() or (db.is_file() and db.stat().st_size == 0)):
        what = "an empty file" if db.exists() else "no such file"
        raise CapsbenchError(
            f"no MLflow store at {uri} ({what}); run `capsbench run` first, or point tracking.uri= "
            "(or output_dir=) at the store your runs wrote to"
        )


def ensure_store(uri: str, artifact_root: Path) -> None:
    """A SQLite store that MLflow can open (call it under store_lock). A missing or empty file is built at a temporary
    name beside it and renamed into place when complete, so a full disk or a kill during the schema migrations leaves
    no half-built store. An existing store that MLflow cannot open is moved aside with a warning and built again only
    when it provably holds no runs (whole, and its runs table empty or absent: half-built by an older capsbench); any
    other (runs in it, or damaged so that its runs cannot be counted) is never moved: a one-line error says how to
    recover it."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    db = sqlite_path(uri)
    if db is None:
        return
    if db.exists() and db.stat().st_size > 0:
        try:
            mlflow_client(uri).search_experiments(max_results=1)
            return
        except (MlflowException, SQLAlchemyError) as exc:
            if is_no_space(exc):
                raise NoSpace(db) from exc
            problem = _first_line(exc)
        runs = _run_count(db)
        if runs != 0:
            raise _unopenable(db, uri, problem, runs)
        aside = db.with_name(f"{db.name}.broken-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
        _forget_engine(uri)
        db.replace(aside)
        log.warning("the MLflow store %s was half-built and holds no runs (%s); moved it to %s and building it again",
                    db, problem, aside.name)
    _build(db, artifact_root)


@contextmanager
def store_faults(uri: str) -> Iterator[None]:
    """Around reading or opening a SQLite store: an error MLflow raises because SQLite finds the file damaged, or
    because an older MLflow wrote it, becomes one CapsbenchError saying how to recover its runs; others pass as
    they are (a full disk, a store that SQLite finds whole)."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (MlflowException, SQLAlchemyError) as exc:
        db = sqlite_path(uri)
        if db is None or is_no_space(exc) or not db.is_file():
            raise
        runs = _run_count(db)
        if runs is None or "out-of-date database schema" in str(exc):
            raise _unopenable(db, uri, _first_line(exc), runs) from None
        raise


def _unopenable(db: Path, uri: str, problem: str, runs: int | None) -> CapsbenchError:
    """The one line for a store that holds runs (or may: `runs` is None when SQLite finds it damaged) but cannot be
    opened, with how to recover them."""
    held = "may hold runs (it is damaged or no SQLite database)" if runs is None else f"holds {runs} run(s)"
    return CapsbenchError(f"the MLflow store {db} {held} but cannot be opened ({problem}); it is left as it is: "
                          f"{recovery(db, uri, damaged=runs is None)}")


def _first_line(exc: BaseException) -> str:
    """An error's first sentence (MLflow's go on with advice of their own), at most 200 characters."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0][:200]


def _forget_engine(uri: str) -> None:
    """Close the engine MLflow keeps for `uri` (one per store URI, SqlAlchemyStore._engine_map): once the file under
    that URI is replaced, its pooled connections would still reach the old file."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engine = SqlAlchemyStore._engine_map.pop(uri, None)
    if engine is not None:
        engine.dispose()


def _run_count(db: Path) -> int | None:
    """Runs in a SQLite store read directly (0 when it has no runs table); None when they cannot be counted: the file
    is no database, or SQLite's own check finds it damaged (a truncated copy, say)."""
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            if conn.execute("PRAGMA quick_check").fetchone() != ("ok",):
                return None
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return conn.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0
    except sqlite3.DatabaseError:
        return None


def _build(db: Path, artifact_root: Path) -> None:
    """Create MLflow's schema in a new file beside `db`, then rename it to `db` (nothing half-built is ever there)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    tmp = db.with_name(f".{db.name}.{secrets.token_hex(6)}.building")
    folders_from_paths()
    try:
        SqlAlchemyStore(sqlite_uri(tmp), artifact_root.resolve().as_uri())
        _forget_engine(sqlite_uri(tmp))
        os.replace(tmp, db)
    except BaseException as exc:  # KeyboardInterrupt too: never leave the temporary file behind
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            leftover.unlink(missing_ok=True)
        if is_no_space(exc):
            raise NoSpace(db) from exc
        raise
