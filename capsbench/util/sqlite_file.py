"""What a SQLite file's 100-byte header says about the file (https://www.sqlite.org/fileformat.html): whether it is a
SQLite database at all, and whether it holds every page its header counts (a truncated copy does not). Read without
opening the database, so that the checks before work can judge an MLflow store in microseconds; and how to recover a
store that may hold runs."""

from __future__ import annotations

import sqlite3
import struct
from contextlib import closing
from pathlib import Path

MAGIC = b"SQLite format 3\x00"
HEADER = 100
MLFLOW_TABLES = {"experiments", "runs"}  # in every MLflow store, whatever its schema's version
SCHEMA_ONLY = {"alembic_version", "sqlite_sequence"}  # in a store whose first migration was cut short, and elsewhere


def damage(path: Path) -> str | None:
    """What is wrong with the SQLite file at `path` that its header shows ('is no SQLite database', 'was cut short:
    ...'); None when nothing shows (a file of 0 bytes is an empty database). A database in WAL mode, whose pages may lie
    in its -wal file, is judged by its magic number alone."""
    with open(path, "rb") as fh:
        head = fh.read(HEADER)
    if not head:
        return None
    if not head.startswith(MAGIC[: len(head)]) or len(head) < len(MAGIC):
        return "is no SQLite database (its first bytes are not 'SQLite format 3')"
    if len(head) < HEADER:
        return f"was cut short: it holds {len(head)} bytes, less than a SQLite header"
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    changes, pages = struct.unpack(">II", head[24:32])  # the file change counter, the pages the header counts
    valid_for = struct.unpack(">I", head[92:96])[0]  # the change counter at which that page count was right
    size, wal = path.stat().st_size, path.with_name(path.name + "-wal")
    if pages and changes == valid_for and not wal.exists() and size < pages * page_size:
        return f"was cut short: its header counts {pages * page_size:,} bytes, the file holds {size:,}"
    return None


def foreign_tables(path: Path) -> list[str]:
    """The tables of the SQLite file at `path` when it is some other application's database (tables, none of them
    MLflow's); [] for an empty database or an MLflow store, whole or half-built, and for a file SQLite cannot open
    (damage() and the store's own checks judge those)."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        return []
    return [] if tables & MLFLOW_TABLES or tables <= SCHEMA_ONLY else sorted(tables)


def recovery(db: Path, uri: str, *, damaged: bool) -> str:
    """How to get a store's runs back, or to go on without them: sqlite3's .recover for a damaged file, MLflow's
    migration for one an older MLflow wrote; a new store either way."""
    if damaged:
        how = (f"recover its runs with `sqlite3 {db} .recover | sqlite3 {db.with_name('recovered.db')}` and point "
               "tracking.uri= at the result")
    else:
        how = f"if an older MLflow wrote it, upgrade it with `mlflow db upgrade {uri}`"
    return f"{how}, or point tracking.uri= (or output_dir=) at a new store"
