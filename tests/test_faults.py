"""Faults that end cleanly: a failed unit exits 3 with its parent run FAILED; SIGINT and SIGTERM exit 130
and 143 with one line and every open run KILLED; a kill while a unit's results are being logged is cleaned up by the
next invocation; a full disk mid-run or while the MLflow store is created is one line naming the path, losing
nothing and leaving no half-built store; a half-built store heals; edited or malformed unit files are measured again.
Synthetic images stand in for MNIST (conftest.make_splits); subprocesses receive real signals."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy
from composing import compose, suite_budget
from conftest import REPO, make_splits
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.errors import NoSpace
from capsbench.run import driver, execute
from capsbench.run.plan import plan
from capsbench.run.store import UnitStore, encode
from capsbench.run.units import UnitResult
from capsbench.tracking import ensure_store
from capsbench.util import atomic
from capsbench.util.uris import sqlite_uri

SMOKE = ["suite=accuracy", "budget=smoke", "train.epochs=1", "device=cpu", "threads=1", "models=[cnn_9x9,capsnet]"]


@pytest.fixture
def synthetic(monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())


def cli(out: Path, mnist_root: Path, *extra: str):
    return CliRunner().invoke(app, ["run", *SMOKE, f"output_dir={out}", f"data.root={mnist_root}", *extra])


def statuses(out: Path) -> dict[str, list[str]]:
    """Run name -> statuses of the runs of that name in <out>/mlflow.db (a parent's as <suite>-<budget>)."""
    client = MlflowClient(sqlite_uri(out / "mlflow.db"))
    found: dict[str, list[str]] = {}
    for run in client.search_runs([client.get_experiment_by_name("capsbench").experiment_id]):
        found.setdefault(suite_budget(run.info.run_name), []).append(run.info.status)
    return {name: sorted(s) for name, s in found.items()}


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    "raised, hint",
    [
        (ValueError("kernel larger than the image"), "fix the cause first: a rerun alone repeats it"),
        (MemoryError("another job took the memory"),
         "a rerun of the same command may succeed (it measures only the missing units)"),
    ],
)
def test_a_failed_unit_exits_3_with_its_error_and_a_failed_parent(tmp_path, synthetic, mnist_root, monkeypatch,
                                                                    raised, hint):
    real = execute.execute

    def capsnet_fails(spec, emit):
        if spec.model == "capsnet":
            raise raised
        return real(spec, emit)

    monkeypatch.setattr(execute, "execute", capsnet_fails)
    result = cli(tmp_path, mnist_root)
    assert result.exit_code == 3, result.output
    assert error_lines(result.output) == ["error: 1 unit(s) failed (each suite's MLflow run is marked FAILED):"]
    line = f"accuracy/capsnet-mnist-s0: the unit failed ({type(raised).__name__}: {raised}); {hint}"
    assert f"  {line}\n" in result.output and f"MISSING {line}" in (tmp_path / "accuracy" / "table.md").read_text()
    assert statuses(tmp_path) == {"accuracy-smoke": ["FAILED"], "cnn_9x9-mnist-s0": ["FINISHED"],
                                  "capsnet-mnist-s0": ["FAILED"]}


def test_every_unit_failing_exits_3_without_tables(tmp_path, synthetic, mnist_root, monkeypatch):
    def fails(spec, emit):
        raise TypeError("an argument of the wrong type")

    monkeypatch.setattr(execute, "execute", fails)
    result = cli(tmp_path, mnist_root)
    assert result.exit_code == 3 and "accuracy: no tables, no unit finished" in result.output
    assert not (tmp_path / "accuracy" / "table.md").exists()
    assert statuses(tmp_path)["accuracy-smoke"] == ["FAILED"]


STALL = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, even if pytest runs in the background
from pathlib import Path
from conftest import make_splits
from capsbench.cli import app
from capsbench.run import execute
from capsbench.run.units import UnitEvent
from capsbench.tracking import writer

marker, where = Path(sys.argv[1]), sys.argv[2]
execute.load_data = lambda dataset, data: make_splits()
real_execute, real_end = execute.execute, writer.Tracker.end_unit

def second_unit_stalls(spec, emit):
    if spec.model == "capsnet":
        emit(UnitEvent(spec.key, "started"))
        marker.touch()
        time.sleep(300)
    return real_execute(spec, emit)

def logging_stalls(self, run_id, result, columns, **kw):
    if result.spec.model == "capsnet":
        self._batch(run_id, params=result.params)  # part of its results are logged
        marker.touch()
        time.sleep(300)
    return real_end(self, run_id, result, columns, **kw)

if where == "unit":
    execute.execute = second_unit_stalls
else:
    writer.Tracker.end_unit = logging_stalls
app(sys.argv[3:], prog_name="capsbench")
"""


def stalled(tmp_path: Path, mnist_root: Path, where: str) -> subprocess.Popen:
    """`capsbench run` in a subprocess, stalled in its second unit (`unit`) or while logging it (`logging`)."""
    marker = tmp_path / "stalled"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", STALL, str(marker), where, "run", *SMOKE, f"output_dir={tmp_path / 'out'}",
         f"data.root={mnist_root}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    return proc


@pytest.mark.parametrize("sig, code, first", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGINT, 130, "interrupted")])
@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_a_signal_ends_every_open_run_killed_with_one_line(tmp_path, mnist_root, sig, code, first):
    proc = stalled(tmp_path, mnist_root, "unit")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert [line.split(":")[1].strip() for line in error_lines(stderr)] == [first], stderr
    assert "Traceback" not in stderr
    assert statuses(tmp_path / "out") == {"accuracy-smoke": ["KILLED"], "cnn_9x9-mnist-s0": ["FINISHED"],
                                          "capsnet-mnist-s0": ["KILLED"]}
    assert len(list((tmp_path / "out" / "accuracy" / "units").glob("*.json"))) == 1  # the finished unit is kept
    report = CliRunner().invoke(app, ["report", f"output_dir={tmp_path / 'out'}"])  # says how to get a table
    assert report.exit_code == 2 and report.output.strip().endswith(
        "its 1 run(s) tabulated nothing (accuracy/smoke/mnist (KILLED)); an interrupted run resumes from its finished "
        "units when the same `capsbench run` command is run again, a running one tabulates when it ends: then report"
    ), report.output


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_a_kill_while_a_unit_is_logged_is_cleaned_up_by_the_next_run(tmp_path, mnist_root, synthetic):
    proc = stalled(tmp_path, mnist_root, "logging")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    out = tmp_path / "out"
    assert statuses(out)["capsnet-mnist-s0"] == ["RUNNING"] and statuses(out)["accuracy-smoke"] == ["RUNNING"]
    assert cli(out, mnist_root).exit_code == 0
    assert statuses(out) == {"accuracy-smoke": ["FINISHED", "KILLED"], "cnn_9x9-mnist-s0": ["FINISHED", "FINISHED"],
                             "capsnet-mnist-s0": ["FINISHED", "KILLED"]}


def test_a_full_disk_mid_run_is_one_line_and_loses_nothing(tmp_path, synthetic, mnist_root, monkeypatch):
    """The second unit's file cannot be written (ENOSPC): exit 3 naming the file, the first unit kept, no run left
    RUNNING; with space again, the same command measures only the second unit."""
    real = atomic._create_temporary
    writes = []

    def full_after_first_unit(path):
        if path.parent.name == "units":
            writes.append(path)
            if len(writes) == 2:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path)

    monkeypatch.setattr(atomic, "_create_temporary", full_after_first_unit)
    result = cli(tmp_path, mnist_root)
    assert result.exit_code == 3, result.output
    (line,) = error_lines(result.output)
    assert line.startswith(f"error: no space left on device writing {writes[1]} (needs at least ")
    assert "free there" in line
    assert "Traceback" not in result.output
    assert [p.name for p in (tmp_path / "accuracy" / "units").iterdir()] == [writes[0].name]
    assert "RUNNING" not in str(statuses(tmp_path)) and statuses(tmp_path)["accuracy-smoke"] == ["FAILED"]
    monkeypatch.setattr(atomic, "_create_temporary", real)
    measured, measure = [], execute.execute
    monkeypatch.setattr(execute, "execute", lambda spec, emit: measured.append(spec.model) or measure(spec, emit))
    assert cli(tmp_path, mnist_root).exit_code == 0 and measured == ["capsnet"]


def test_atomic_writes_on_a_full_disk_name_the_file_and_the_space_it_needed(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(NoSpace, match=r"writing .*table\.md \(needs at least 100 B, [0-9.]+ [kMG]?B free there\)"):
        atomic.write_text(tmp_path / "table.md", "x" * 100)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


@contextmanager
def sqlite_pages(limit: int):
    """Every SQLite connection SQLAlchemy opens holds at most `limit` pages: writes beyond fail with SQLITE_FULL,
    as on a full disk."""

    def cap(dbapi_connection, record):
        dbapi_connection.execute(f"PRAGMA max_page_count = {limit}")

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", cap)
    try:
        yield
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", cap)


def test_a_full_disk_while_the_store_is_created_leaves_no_half_built_store(tmp_path, synthetic, mnist_root):
    with sqlite_pages(100):
        result = cli(tmp_path, mnist_root)
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith(f"error: no space left on device writing {tmp_path / 'mlflow.db'} (")
    assert not (tmp_path / "mlflow.db").exists() and not list(tmp_path.glob(".mlflow.db.*"))
    assert cli(tmp_path, mnist_root).exit_code == 0  # with space again: nothing to repair


def test_a_half_built_store_is_moved_aside_and_rebuilt(tmp_path, caplog):
    db = tmp_path / "mlflow.db"
    with sqlite_pages(150), pytest.raises(sqlalchemy.exc.OperationalError, match="database or disk is full"):
        MlflowClient(sqlite_uri(db)).search_experiments()  # as an older capsbench created it: in place
    with pytest.raises(Exception, match="already exists|out-of-date"):
        MlflowClient(sqlite_uri(db)).search_experiments()  # every later open fails
    ensure_store(sqlite_uri(db), tmp_path / "art")
    (aside,) = tmp_path.glob("mlflow.db.broken-*")
    assert "was half-built and holds no runs" in caplog.text and aside.name in caplog.text
    assert MlflowClient(sqlite_uri(db)).search_experiments()  # opens


def test_a_store_with_runs_that_cannot_be_opened_is_never_moved(tmp_path):
    import sqlite3

    db = tmp_path / "mlflow.db"
    client = MlflowClient(sqlite_uri(db))
    client.create_run(client.create_experiment("capsbench"))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00dbabe0000'")  # as if a newer MLflow wrote it
    other = tmp_path / "copy.db"  # a fresh URI: MLflow caches the store it opened for the first one
    other.write_bytes(db.read_bytes())
    with pytest.raises(Exception, match=r"holds 1 run\(s\) but cannot be opened .* it is left as it is"):
        ensure_store(sqlite_uri(other), tmp_path / "art")
    assert other.exists() and not list(tmp_path.glob("*.broken-*"))


def store_with_runs(db: Path, runs: int = 3) -> None:
    client = MlflowClient(sqlite_uri(db))
    experiment = client.create_experiment("capsbench")
    for _ in range(runs):
        client.set_terminated(client.create_run(experiment).info.run_id)


@pytest.mark.parametrize("damage", ["cut in half", "not a database"])
def test_a_damaged_store_that_may_hold_runs_is_never_moved_and_stops_run_and_report_before_work(
        tmp_path, synthetic, mnist_root, damage):
    db = tmp_path / "mlflow.db"
    store_with_runs(db)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2] if damage == "cut in half" else b"runs,as,csv\n" + data[100:])
    before = db.read_bytes()
    said = ("was cut short: its header counts " if damage == "cut in half" else
            "is no SQLite database (its first bytes are not 'SQLite format 3')")
    for command in (["run", *SMOKE, f"data.root={mnist_root}"], ["report"]):
        result = CliRunner().invoke(app, [*command, f"output_dir={tmp_path}"])
        assert result.exit_code == 2, result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"error: the MLflow store {db} {said}") and line.endswith(
            f"so the runs it may hold cannot be read; it is left as it is: recover its runs with `sqlite3 {db} "
            f".recover | sqlite3 {tmp_path / 'recovered.db'}` and point tracking.uri= at the result, or point "
            "tracking.uri= (or output_dir=) at a new store"), line
    assert db.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]  # nothing written


def test_the_store_itself_moves_only_a_store_that_provably_holds_no_runs(tmp_path):
    """Behind the checks before work: a store whose runs cannot be counted (damaged) is never moved; an empty file is
    built in place."""
    db = tmp_path / "mlflow.db"
    store_with_runs(db)
    other = tmp_path / "copy.db"  # a fresh URI: MLflow caches the store it opened for the first one
    other.write_bytes(db.read_bytes()[:40_960])
    with pytest.raises(Exception, match=r"may hold runs \(it is damaged or no SQLite database\) but cannot be opened "
                                        r".* it is left as it is: recover its runs with `sqlite3 "):
        ensure_store(sqlite_uri(other), tmp_path / "art")
    assert len(other.read_bytes()) == 40_960 and not list(tmp_path.glob("*.broken-*"))
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    ensure_store(sqlite_uri(empty), tmp_path / "art")
    assert MlflowClient(sqlite_uri(empty)).search_experiments() and not list(tmp_path.glob("*.broken-*"))


def rewrite(path: Path, change) -> None:
    """Edit a unit file's result with `change` and store it with a checksum that matches (as a careful hand would)."""
    data = json.loads(path.read_text())
    result = UnitResult.from_dict(data["result"])
    change(result)
    path.write_text(encode(result))


UNDER_CHECKSUM = {  # a record the tables would crash on, stored under a checksum that matches
    "missing field": (lambda rec: rec.pop("value"), "lacks value"),
    "NaN value": (lambda rec: rec.update(value=float("nan")), "has the value nan, not a finite number"),
    "word for a seed": (lambda rec: rec.update(seed="zero"), "has the seed 'zero', not an integer"),
    "outcomes not base64": (lambda rec: rec.update(outcomes="%%%"), "has outcomes that do not decode to its n images"),
    "outcomes of other n": (lambda rec: rec.update(n=rec["n"] + 64), "has outcomes that do not decode to its n images"),
}


@pytest.mark.parametrize("edit", ["value", *UNDER_CHECKSUM])
def test_a_unit_file_that_cannot_be_trusted_is_named_moved_aside_and_measured_again(tmp_path, synthetic, caplog,
                                                                                      edit):
    cfg = compose([*SMOKE, "models=[cnn_9x9]", f"output_dir={tmp_path}"])
    clean = driver.run_suite(cfg)
    (unit,) = plan(cfg)
    path = UnitStore(tmp_path).path(unit)
    if edit == "value":  # edited by hand: the checksum no longer matches
        data = json.loads(path.read_text())
        data["result"]["records"][0]["value"] = 99.9
        path.write_text(json.dumps(data))
        reason = "does not match its sha256"
    else:
        change, reason = UNDER_CHECKSUM[edit]
        rewrite(path, lambda r: change(r.records[0]))
    again = driver.run_suite(cfg)
    assert f"unit result {path} of accuracy/cnn_9x9-mnist-s0 cannot be trusted" in caplog.text and reason in caplog.text
    assert again.records == clean.records and len(list(path.parent.glob("*.corrupt-*"))) == 1
    assert statuses(tmp_path)["cnn_9x9-mnist-s0"] == ["FINISHED", "FINISHED"]


def test_a_value_outside_its_own_interval_fails_the_schema(tmp_path, synthetic):
    cfg = compose([*SMOKE, "models=[cnn_9x9]", f"output_dir={tmp_path}", "tracking.enabled=false"])
    driver.run_suite(cfg)
    (unit,) = plan(cfg)
    path = UnitStore(tmp_path).path(unit)
    rewrite(path, lambda r: r.records[0].update(value=99.9, ci_low=10.0, ci_high=20.0))
    assert UnitStore(tmp_path).load(unit) is None and list(path.parent.glob("*.corrupt-*"))
