"""Faults of the MLflow store and its folder, each one line with a documented exit status: another application's SQLite
database as the store; a store damaged mid-file or written by an older MLflow, refused by `report` as by `run`; an
output folder `report` cannot write; a file-size limit while the store is built; the output folder deleted while a
run writes to it."""

import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from random import Random

import pytest
from conftest import make_splits
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.run import execute
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


@pytest.fixture(scope="module")
def store_with_a_run(tmp_path_factory):
    """An MLflow store (built by MLflow) holding one run: the file to copy and damage."""
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("store")
    uri = sqlite_uri(folder / "mlflow.db")
    ensure_store(uri, folder / "mlartifacts")
    client = MlflowClient(uri)
    client.create_run(client.create_experiment("capsbench", artifact_location=(folder / "mlartifacts").as_uri()))
    return folder / "mlflow.db"


def damaged_mid_file(db):
    """60,000 bytes of garbage after the first page: the header still counts the file's pages, SQLite finds it
    malformed."""
    with db.open("r+b") as fh:
        fh.seek(4096)
        fh.write(Random(0).randbytes(60_000))


def older_schema(db):
    """The schema version of MLflow's first migration, as a store an older MLflow wrote says."""
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '451aebb31d03'")
        conn.commit()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "report"])
@pytest.mark.parametrize("damage, said", [
    (damaged_mid_file, "may hold runs (it is damaged or no SQLite database) but cannot be opened ((sqlite3."
                       "DatabaseError) database disk image is malformed); it is left as it is: recover its runs with "
                       "`sqlite3 "),
    (older_schema, "holds 1 run(s) but cannot be opened (Detected out-of-date database schema (found version "
                   "451aebb31d03, but expected "),
], ids=["damaged mid-file", "older schema"])
def test_a_store_mlflow_cannot_open_is_one_line_for_report_as_for_run(tmp_path, mnist_root, store_with_a_run,
                                                                      command, damage, said):
    db = tmp_path / "mlflow.db"
    shutil.copy(store_with_a_run, db)
    damage(db)
    before = db.read_bytes()
    args = [*RUN, f"data.root={mnist_root}"] if command == "run" else ["report"]
    result = CliRunner().invoke(app, [*args, f"output_dir={tmp_path}"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: the MLflow store {db} {said}"), result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    if damage is older_schema:
        assert f"upgrade it with `mlflow db upgrade {sqlite_uri(db)}`" in result.output
    assert db.read_bytes() == before and not (tmp_path / "runs").exists()


def test_a_report_whose_output_folder_cannot_be_written_is_refused_before_reading(tmp_path, monkeypatch):
    """As on a read-only file system (os.access answers for the mount, even to root): one line naming the store to
    read from elsewhere, nothing written."""
    from capsbench.config import preflight

    (tmp_path / "mlflow.db").write_bytes(b"")
    monkeypatch.setattr(preflight.os, "access", lambda path, mode: not mode & os.W_OK)
    result = CliRunner().invoke(app, ["report", f"output_dir={tmp_path}"])
    assert result.exit_code == 2, result.output
    assert result.output == (f"error: output_dir {tmp_path} is not writable: read-only or not yours; the report is "
                             "written under it: choose another output_dir= and read this store with tracking.uri="
                             f"{sqlite_uri(tmp_path / 'mlflow.db')} or fix its permissions\n")
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]


def test_an_unknown_suite_is_refused_by_report_before_its_libraries_load(tmp_path, cli_probe):
    probe = cli_probe(["report", "suite=acuracy", f"output_dir={tmp_path}"], cwd=tmp_path)
    assert probe.codes == [2] and probe.heavy == [], probe.stderr
    said = "error: unknown suite 'acuracy': did you mean 'accuracy'? (see `capsbench list suites`)"
    assert probe.stderr.strip() == said


@pytest.mark.slow
def test_an_output_folder_deleted_during_the_run_stops_it_in_one_line(tmp_path, mnist_root, monkeypatch):
    """`rm -rf` of the output folder after the first unit: SQLite finds its file gone at the next write; the run stops
    with one line (exit 3) and recreates nothing."""
    out, measured, measure = tmp_path / "out", [], execute.execute

    def deleting_before_the_second(spec, emit):
        measured.append(spec.model)
        if len(measured) == 2:
            shutil.rmtree(out)
        return measure(spec, emit)

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    monkeypatch.setattr(execute, "execute", deleting_before_the_second)
    result = CliRunner().invoke(app, [*RUN[:-1], "models=[cnn_9x9,capsnet]", f"data.root={mnist_root}",
                                      f"output_dir={out}"])
    assert result.exit_code == 3, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [f"error: the MLflow store {out / 'mlflow.db'} was deleted or moved while this run wrote to it "
                      "(its output folder removed?), so nothing more can be logged; run the same command again: it "
                      "measures what is missing and reuses the checkpoints still in the cache"], result.output
    assert "Traceback" not in result.output and not out.exists() and measured == ["cnn_9x9", "capsnet"]
