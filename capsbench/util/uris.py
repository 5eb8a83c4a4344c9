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


def ui_command(uri: str) -> str:
    """The command that browses a tracking store, each argument shell-quoted (paths may hold spaces)."""
    return shlex.join(["uv", "run", "mlflow", "ui", "--backend-store-uri", uri])
