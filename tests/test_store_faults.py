"""Faults of the MLflow store and its folder, each one line with a documented exit status: another application's SQLite
database as the store, and a file-size limit while the store is built."""

import os
import resource
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.tracking import ensure_store
from capsbench.util.sqlite_file import foreign_tables
from capsbench.util.uris import sqlite_uri

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1", "models=[cnn_9x9]",
       "data.test_subset=100"]


def limited(kilobytes: int):
    """A child's file-size limit (`ulimit -f`), its hard limit kept."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (kilobytes * 1024, resource.getrlimit(
        resource.RLIMIT_FSIZE)[1]))


@pytest.mark.slow
def test_a_file_size_limit_while_the_store_is_built_is_one_line(tmp_path, mnist_root):
    """SQLite says only "disk I/O error": with a file-size limit in force, that is the limit, said so; no half-built
    store is left, and the same command with the limit raised needs no repair."""
    out = tmp_path / "out"
    args = [sys.executable, "-m", "capsbench", *RUN, f"data.root={mnist_root}", f"output_dir={out}", "-q"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, preexec_fn=limited(200),  # noqa: PLW1509
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: no room to write {out / 'mlflow.db'}: this process may write files of at "
                                  "most 200.0 kB (ulimit -f) ("), done.stderr
    assert done.stderr.count("\n") == 1 and "raise the limit (ulimit -f unlimited)" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["mlflow.db.lock"]


@pytest.mark.parametrize("command", ["run", "report"])
def test_another_applications_database_is_never_written_into(tmp_path, mnist_root, command):
    """An mlflow.db that holds some other program's tables: refused before work, its bytes untouched (MLflow would add
    its ~70 tables beside them for good)."""
    db = tmp_path / "mlflow.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
        conn.commit()
    before = db.read_bytes()
    args = [*RUN, f"data.root={mnist_root}"] if command == "run" else ["report"]
    result = CliRunner().invoke(app, [*args, f"output_dir={tmp_path}"])
    assert result.exit_code == 2, result.output
    assert result.output == (f"error: the MLflow store {db} is another application's SQLite database (tables users), "
                             "which MLflow would write its own tables into; it is left as it is: point tracking.uri= "
                             "(or output_dir=) at a new or MLflow-made file\n")
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


@pytest.mark.parametrize("tables", [[], ["alembic_version"], ["alembic_version", "experiments", "runs", "later"]],
                         ids=["empty", "first migration cut short", "a later MLflow's"])
def test_an_empty_database_and_mlflow_stores_are_not_foreign(tmp_path, tables):
    with closing(sqlite3.connect(tmp_path / "mlflow.db")) as conn:
        conn.execute("VACUUM")
        for table in tables:
            conn.execute(f"CREATE TABLE {table} (id INTEGER)")
    assert foreign_tables(tmp_path / "mlflow.db") == []


@pytest.mark.slow
def test_a_store_mlflow_built_is_not_foreign(tmp_path):
    ensure_store(sqlite_uri(tmp_path / "mlflow.db"), tmp_path / "mlartifacts")
    assert foreign_tables(tmp_path / "mlflow.db") == []
