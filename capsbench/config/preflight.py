"""Checks of the machine a run is about to use, before any work or write: the planned dataset's files, whole (or a
download host that answers), output and cache directories that can be written, and a remote tracking store that answers.
Each failure is one CapsbenchError (exit 2); torch-free, and bounded by short timeouts (TIMEOUT_S each)."""

from __future__ import annotations

import os
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from omegaconf import DictConfig

from capsbench.data.files import DATA_FILES, by_hand, check_damaged, missing_text
from capsbench.errors import CapsbenchError, clipped
from capsbench.suites import CATALOG
from capsbench.util.paths import resolved
from capsbench.util.sqlite_file import damage, foreign_tables, recovery
from capsbench.util.uris import remote_address, sqlite_path

TRUE = ("true", "1")  # how MLflow reads a boolean environment variable
TIMEOUT_S = 3.0  # per network check: a host that does not answer in this time is taken as unreachable


def check_before_work(cfg: DictConfig) -> None:
    """Everything about the machine a `capsbench run` or `train` with this config needs (see module docstring)."""
    if cfg.suite is None or CATALOG.get(cfg.suite).needs_data:  # `capsbench train` names no suite: it reads data
        check_data_files(cfg.dataset, cfg.data.root, download=cfg.data.download)
    check_writable(cfg.output_dir, "output_dir")
    check_writable(cfg.cache_dir, "cache_dir")
    if cfg.tracking.enabled:
        check_tracking(cfg.tracking.uri)


def reachable(host: str, port: int, timeout: float = TIMEOUT_S) -> str | None:
    """None when a TCP connection to host:port opens within `timeout` seconds (name lookup included), else why not.

    The lookup and connection run in a daemon thread, so that a resolver that hangs (no network) costs `timeout` and
    nothing more."""
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or type(exc).__name__)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def check_data_files(dataset: str, root: str, *, download: bool) -> None:
    """The dataset's declared files are under data.root and hold what the official files hold (IDX header and size,
    published checksums), or data.download is on and its download host answers."""
    check_damaged(dataset, Path(root))
    spec = DATA_FILES[dataset]
    missing = spec.missing(Path(root))
    if not missing:
        return
    where = missing_text(dataset, missing)
    if spec.download_url is None:
        raise CapsbenchError(f"{where}; capsbench cannot download them: {by_hand(dataset)}")
    if not download:
        raise CapsbenchError(f"{where} and data.download=false: {by_hand(dataset)}, or allow data.download=true")
    parts = urlsplit(spec.download_url)
    problem = reachable(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    if problem is not None:
        raise CapsbenchError(f"{where}, and their download host {parts.hostname} cannot be reached ({problem}): "
                             f"{by_hand(dataset)}, or run where the internet is reachable")


def check_writable(directory: str, key: str, fix: str | None = None) -> None:
    """`directory` (the setting `key`) is, or can be created as, a directory this process may write in."""
    fix = fix or f"choose another {key}="
    path = Path(directory)
    resolved(path, key)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = f"{probe} is a file" if probe != path else "it is a file"
        raise CapsbenchError(f"{key} {directory} cannot be used as a directory: {what}; {fix}")
    if not os.access(probe, os.W_OK | os.X_OK):
        inside = "" if probe == path else f" (it would be created inside {probe})"
        raise CapsbenchError(f"{key} {directory} is not writable{inside}: read-only or not yours; {fix} or fix its "
                             "permissions")


def check_tracking(uri: str, *, reading: bool = False) -> None:
    """A SQLite store is whole as far as its header shows, and its folder can be written (unless only `reading`); a
    remote store (server or database) answers within TIMEOUT_S."""
    db = sqlite_path(uri)
    if db is not None:
        if resolved(db, "the MLflow store").exists() and not db.is_file():
            what = "a directory" if db.is_dir() else "no regular file"
            raise CapsbenchError(f"the MLflow store {db} is {what}, not a SQLite file: point tracking.uri= at a file "
                                 "(sqlite:///path/to/mlflow.db) or choose another output_dir=")
        problem = damage(db) if db.is_file() and os.access(db, os.R_OK) else None
        if problem is not None:
            raise CapsbenchError(f"the MLflow store {db} {problem}, so the runs it may hold cannot be read; it is left "
                                 f"as it is: {recovery(db, uri, damaged=True)}")
        if db.is_file() and os.access(db, os.R_OK) and (tables := foreign_tables(db)):
            raise CapsbenchError(f"the MLflow store {db} is another application's SQLite database (tables "
                                 f"{clipped(', '.join(tables))}), which MLflow would write its own tables into; it is "
                                 "left as it is: point tracking.uri= (or output_dir=) at a new or MLflow-made file")
        if not reading:
            check_writable(str(db.parent), "the MLflow store's folder", "choose another tracking.uri= or output_dir=")
            for path in (db, db.with_name(db.name + ".lock")):
                if path.exists() and not os.access(path, os.W_OK):
                    raise CapsbenchError(f"the MLflow store's file {path} is read-only, so no run could be logged: "
                                         "make it writable, choose another tracking.uri= or output_dir=, or set "
                                         "tracking.enabled=false to run without MLflow")
        return
    if urlsplit(uri).scheme in ("", "file") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in TRUE:
        raise CapsbenchError(f"tracking.uri={uri} is a file store (a folder like ./mlruns), which this MLflow refuses "
                             "to open: point tracking.uri= at a SQLite file (sqlite:///path/to/mlflow.db; `mlflow "
                             "migrate-filestore` moves existing runs into one) or a tracking server (http://host:port)")
    address = remote_address(uri)
    if address is None:
        return
    problem = reachable(*address)
    if problem is None and urlsplit(uri).scheme in ("http", "https"):
        problem = mlflow_health(uri)
    if problem is not None:
        off = "" if reading else ", or set tracking.enabled=false to run without MLflow"  # report has no such key
        raise CapsbenchError(f"tracking.uri={uri} cannot be reached ({problem}); start the tracking server or fix "
                             f"tracking.uri={off}")


def mlflow_health(uri: str, timeout: float = TIMEOUT_S) -> str | None:
    """None when the server at `uri` answers GET /health with 200, as an MLflow tracking server does; else what it
    answered instead (a port that something else holds, a proxy, a server still starting)."""
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310  (the user's own tracking URI)
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        return f"GET {url}: {getattr(exc, 'reason', exc)}"
    return None if status == 200 else f"GET {url} answered {status}: not an MLflow tracking server"
