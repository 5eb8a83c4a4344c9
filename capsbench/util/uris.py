"""Store URIs built from paths, never by joining strings: a directory named `runs?v2` or `50%` must keep its MLflow
database inside it. Torch-free and SQLAlchemy-free, so that the CLI resolves its default store quickly; the URIs
parse back to the same path with SQLAlchemy's make_url (what MLflow opens them with), which the tests check."""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import unquote, urlsplit

SQLITE = "sqlite:///"


def sqlite_uri(path: str | Path) -> str:
    """sqlite:///<absolute path> for the SQLite file at `path`. Only '%' and '?' are percent-encoded: SQLAlchemy's URL
    parser reads '?' as the start of a query and decodes %XX in the database path; every other character (spaces, '#',
    letters beyond ASCII) stands as it is, so that the URI reads as the path."""
    return SQLITE + str(Path(path).expanduser().resolve()).replace("%", "%25").replace("?", "%3F")


def sqlite_path(uri: str) -> Path | None:
    """The database file a sqlite:/// URI names (query string dropped, %XX decoded), or None for another store."""
    if not uri.startswith(SQLITE):
        return None
    database = uri.removeprefix(SQLITE).split("?", 1)[0]
    return Path(unquote(database)) if database and database != ":memory:" else None


def remote_address(uri: str) -> tuple[str, int] | None:
    """(host, port) of a tracking server or database URI (http(s)://, postgresql://, ...), None for a local store
    (a path, file:, sqlite:) or a URI without a host (e.g. `databricks`)."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file", "sqlite") or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: the client will say so
        return None
    default = {"https": 443, "http": 80, "postgresql": 5432, "mysql": 3306, "mssql": 1433}
    scheme = parts.scheme.split("+", 1)[0]
    if port is None and scheme not in default:
        return None
    return parts.hostname, port or default[scheme]


def shown_path(path: str | Path, base: str | Path) -> str:
    """A local path as a document may print it, never absolute: relative to `base` (the output folder) when inside it,
    else relative to the working directory, else its last two parts after ".../"."""
    path = Path(path).expanduser().resolve()
    for root in (Path(base).expanduser().resolve(), Path.cwd()):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix() or "."
    return ".../" + "/".join(path.parts[-2:])


def shown_uri(uri: str, base: str | Path) -> str:
    """A tracking URI as a document may print it: a SQLite store as its file's shown_path, a server without its
    credentials, never an absolute local path."""
    db = sqlite_path(uri)
    if db is not None:
        return shown_path(db, base)
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return shown_path(unquote(parts.path), base)
    netloc = parts.hostname or ""
    return parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")).geturl()


UI_PORT = 5000  # where `mlflow ui` serves by default


def ui_command(uri: str) -> str:
    """The command that browses a tracking store, each argument shell-quoted (paths may hold spaces)."""
    return shlex.join(["uv", "run", "mlflow", "ui", "--backend-store-uri", uri])


def runs_url(experiment_id: str, base: str = f"http://127.0.0.1:{UI_PORT}") -> str:
    """The address of an experiment's runs table in the MLflow UI (MLflow 3 opens on its GenAI home page otherwise)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs"


def browse_hint(uri: str, experiment_id: str | None) -> str:
    """How a reader gets to the runs table: the command that serves the store (none for a server, which serves
    already) and the runs table's address."""
    if remote_address(uri) is not None and urlsplit(uri).scheme.startswith("http"):
        return runs_url(experiment_id, uri) if experiment_id else uri
    command = ui_command(uri)
    return f"{command}, then open {runs_url(experiment_id)}" if experiment_id else command
