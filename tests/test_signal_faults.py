"""Signals from the console script's first instruction to its last: a SIGINT or SIGTERM while the command line's modules
import, while an MLflow write is under way, or while the open runs are being marked KILLED ends with one line, 130 or
143 and no traceback; the runs are marked KILLED at once, or, where another process keeps the store locked, left to the
next run with a line that says so. Subprocesses receive real signals; an import or a write is paused so that the
signal lands inside it."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from mlflow.tracking import MlflowClient

from capsbench.tracking import Tracker
from capsbench.util.uris import sqlite_uri

SCRIPT = Path(sys.executable).parent / "capsbench"  # the console script, as a user starts it
PAUSE_IMPORT = """
import os, sys, time
from pathlib import Path


class Pause:
    \"\"\"The first import of $PAUSE_ON touches $PAUSE_MARKER and waits there for $PAUSE_SECONDS.\"\"\"

    def find_spec(self, name, path=None, target=None):
        marker = Path(os.environ["PAUSE_MARKER"])
        if name == os.environ["PAUSE_ON"] and not marker.exists():
            marker.touch()
            time.sleep(float(os.environ["PAUSE_SECONDS"]))


sys.meta_path.insert(0, Pause())
"""
PAUSE_WRITE = """
import sys, time
from pathlib import Path
import sqlalchemy

marker, when = Path(sys.argv[1]), sys.argv[2]


def pause(conn, cursor, statement, parameters, context, executemany):
    # the first write of the run's params, inside its transaction (`after`, the store locked) or before it
    if statement.lstrip().upper().startswith("INSERT INTO PARAMS") and not marker.exists():
        marker.touch()
        time.sleep(300)


sqlalchemy.event.listen(sqlalchemy.engine.Engine, f"{when}_cursor_execute", pause)
sys.argv = ["capsbench", *sys.argv[3:]]
from capsbench.__main__ import main  # as the console script runs

main()
"""
RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "models=[cnn_9x9]"]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def paused(command: list[str], marker: Path, env: dict[str, str]) -> subprocess.Popen:
    """`command` started, once it has reached its pause (the marker exists)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("module", ["typer", "torch"])
@pytest.mark.parametrize("sig, code, first", [(signal.SIGTERM, 143, "error: terminated (SIGTERM): "),
                                              (signal.SIGINT, 130, "error: interrupted: ")])
def test_a_signal_while_modules_import_is_one_line(tmp_path, mnist_root, module, sig, code, first):
    """typer: while the console script imports the command line (before it can act on anything); torch: while the
    command imports it, once the input is checked."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(PAUSE_IMPORT)
    marker = tmp_path / "paused"
    env = {"PYTHONPATH": str(tmp_path / "hook"), "PAUSE_ON": module, "PAUSE_MARKER": str(marker),
           "PAUSE_SECONDS": "2"}
    proc = paused([str(SCRIPT), *RUN, f"data.root={mnist_root}", f"output_dir={tmp_path / 'out'}"], marker, env)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == code, stderr
    assert len(error_lines(stderr)) == 1 and stderr.startswith(first) and "Traceback" not in stderr, stderr


def write_paused(tmp_path: Path, mnist_root: Path, when: str) -> subprocess.Popen:
    """`capsbench run` paused at its first write of params into the MLflow store: inside the write's transaction
    (`after` its first statement: the store is locked by it) or `before` it."""
    marker = tmp_path / "paused"
    env = {"PYTHONPATH": str(REPO / "tests")}
    return paused([sys.executable, "-c", PAUSE_WRITE, str(marker), when, *RUN, f"data.root={mnist_root}",
                   f"output_dir={tmp_path}"], marker, env)


def statuses(out: Path) -> list[str]:
    client = MlflowClient(sqlite_uri(out / "mlflow.db"))
    return [r.info.status for r in client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])]


def test_a_signal_during_an_mlflow_write_and_another_while_runs_end_is_one_line(tmp_path, mnist_root):
    """The write the signal cuts short holds the store locked until capsbench lets go of it: the run is marked KILLED
    at once, quietly; a second signal while that happens changes nothing."""
    proc = write_paused(tmp_path, mnist_root, "after")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert error_lines(stderr) == [stderr.strip()] and "Traceback" not in stderr, stderr
    assert stderr.startswith("error: interrupted: 1 open MLflow run(s) marked KILLED; every finished unit"), stderr
    assert statuses(tmp_path) == ["KILLED"]


def test_a_store_another_process_keeps_locked_is_left_to_the_next_run_and_the_line_says_so(tmp_path, mnist_root):
    proc = write_paused(tmp_path, mnist_root, "before")
    other = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing, for longer than the marking waits
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    waited = time.monotonic() - start
    other.execute("ROLLBACK")
    other.close()
    assert proc.returncode == 143, stderr
    assert error_lines(stderr) == [stderr.strip()] and "Traceback" not in stderr, stderr
    assert stderr.startswith(f"error: terminated (SIGTERM): 1 of 1 open MLflow run(s) could not be marked KILLED now "
                             f"(the store {tmp_path / 'mlflow.db'} stayed locked); the next run in this store marks "
                             "them KILLED; "), stderr
    assert waited < 120, waited  # MLflow's own writes waited 20 s each, every failure logged with a traceback
    assert statuses(tmp_path) == ["RUNNING"]
    Tracker(uri=sqlite_uri(tmp_path / "mlflow.db"), experiment="capsbench", artifact_root=tmp_path / "art").open()
    assert statuses(tmp_path) == ["KILLED"]  # as the next run in this store opens it
