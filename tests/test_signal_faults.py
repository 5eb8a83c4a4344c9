"""Signals from the console script's first instruction to its last: a SIGINT or SIGTERM while the command line's modules
import, while an MLflow write is under way, or while the open runs are being marked KILLED ends with one line, 130 or
143 and no traceback; the runs are marked KILLED at once, or, where another process keeps the store locked, left to the
next run with a line that says so. Subprocesses receive real signals; an import or a write is paused so that the
signal lands inside it."""

import ctypes
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
from capsbench.util import signals
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


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
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


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
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


def _ended(pid: int) -> bool:
    """Whether process `pid` is gone (or a zombie no one reaped: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, group", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
                         ids=["SIGTERM to the driver", "Ctrl-C to the terminal's process group"])
def test_a_signal_while_local_slurm_jobs_run_is_one_line_and_ends_every_job_without_a_traceback(
        tmp_path, mnist_root, sig, code, group):
    """launcher=slurm slurm.cluster=local: the jobs share the driver's terminal. The driver cancels them; none prints
    a traceback (on the terminal or in its log) and none outlives it for long."""
    pytest.importorskip("submitit")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [str(SCRIPT), "run", "suite=accuracy", "budget=smoke", "models=[cnn_9x9]", "seeds=[0,1]", "train.epochs=1",
         "device=cpu", "threads=1", "tracking.enabled=false", "launcher=slurm", "slurm.cluster=local",
         "slurm.gpus_per_unit=0", "slurm.cpus_per_unit=1", f"data.root={mnist_root}", f"output_dir={out}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 500
    while not list((out / "slurm" / "events").glob("*.jsonl")):  # a unit has started in a job
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == code, stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [stderr.strip().splitlines()[-1]]
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stdout + stderr, stderr
    (submitted,) = [line for line in stderr.splitlines() if "submitted 2 job(s) to local: " in line]
    jobs = [int(j) for j in submitted.rpartition(": ")[2].split(", ")]  # a local job's id is its process id
    while not all(_ended(pid) for pid in jobs):
        assert time.monotonic() < deadline, [pid for pid in jobs if not _ended(pid)]
        time.sleep(0.5)
    logs = "".join(p.read_text() for p in (out / "slurm").glob("*_log.*"))
    assert "Traceback" not in logs and "KeyboardInterrupt" not in logs, logs


def test_a_plain_keyboard_interrupt_a_library_raises_for_a_sigterm_keeps_its_status():
    """Ray's waits turn the Terminated our handler raises into a plain KeyboardInterrupt: the status stays 143."""
    with signals.signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except signals.Terminated:
            plain = KeyboardInterrupt()  # what the library raises instead
        assert signals.exit_status(plain) == 143 and signals.by_signal(plain)


def test_handlers_a_library_replaces_unseen_are_set_again():
    """A handler set at the C level (as Ray's driver sets one for SIGTERM) is replaced by the one from before."""
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    with signals.signals_raise():
        with signals.handlers_kept():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # as ray.init does
            libc.signal(signal.SIGTERM, ctypes.c_void_p(1))  # SIG_IGN, unseen by Python
        with pytest.raises(signals.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)


@pytest.mark.slow
def test_a_signal_while_ray_tasks_run_is_one_line_with_its_own_status(tmp_path, mnist_root):
    """launcher=ray: Ray's driver sets its own SIGTERM handlers and its waits re-raise ours as a plain
    KeyboardInterrupt; a SIGTERM still ends the run with one line and 143, its tasks cancelled."""
    pytest.importorskip("ray")
    out = tmp_path / "out"
    env = {**os.environ, "RAY_raylet_start_wait_time_s": "300"}  # a busy machine starts Ray slowly
    proc = subprocess.Popen(
        [str(SCRIPT), "run", "suite=accuracy", "budget=smoke", "models=[cnn_9x9]", "seeds=[0,1]", "train.epochs=1",
         "device=cpu", "threads=1", "tracking.enabled=false", "launcher=ray", "ray.num_cpus=2",
         f"data.root={mnist_root}", f"output_dir={out}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    said, deadline = [], time.monotonic() + 900
    try:
        while not any("submitted to Ray" in line for line in said):
            said.append(proc.stderr.readline())
            assert said[-1] and time.monotonic() < deadline, "".join(said)
        time.sleep(10)  # the tasks start
        proc.send_signal(signal.SIGTERM)
        stdout, rest = proc.communicate(timeout=300)
    finally:
        proc.kill()  # a no-op once it has ended; else nothing outlives the test
    stderr = "".join(said) + rest
    assert proc.returncode == 143, stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [stderr.strip().splitlines()[-1]]
    assert stderr.strip().splitlines()[-1].startswith("error: terminated (SIGTERM): ")
    assert "Traceback" not in stdout + stderr and "SIGTERM received" not in stderr, stderr
