"""Faults a careful user meets on a real machine: a read-only mlflow.db (refused before work), a read-only cache_dir
shared by two output directories, HOME unset with LANG=C and an output directory named with spaces, '?', '#', '%' and
letters beyond ASCII (no stray percent-encoded folder anywhere), stdin closed with stdout piped, two `report`s while
a `run` writes the same store, and the checkpoint cache deleted while the attacks run. Read-only files are read-only
for root too: the commands run without the capabilities that let root write anyway (setpriv)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from composing import compose
from conftest import MARKER, PROBE, REPO, make_splits
from mlflow.tracking import MlflowClient
from report_fixtures import accuracy

from capsbench.config.compose import to_dict, to_yaml
from capsbench.reporting.outputs import write_suite
from capsbench.run import driver, execute
from capsbench.run.units import UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.suites.robustness.phases import UnitAttacks
from capsbench.tracking import Tracker, flatten
from capsbench.util.uris import sqlite_uri
from capsbench.util.version import __version__

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1", "models=[cnn_9x9]"]
NO_ROOT = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]  # root as a plain user
SCRIPT = Path(sys.executable).parent / "capsbench"


def as_a_user(*commands: list[str], cwd: Path) -> tuple[list[int], list[str], list[str]]:
    """`capsbench` commands in one fresh interpreter that file permissions bind: exit codes, error lines, and the
    heavy libraries imported."""
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: read-only files would be written anyway")
    prefix = NO_ROOT if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, sys.executable, "-c", PROBE, json.dumps(commands)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)
    report = [line for line in done.stderr.splitlines() if line.startswith(MARKER)]
    assert report, done.stderr
    found = json.loads(report[-1].removeprefix(MARKER))
    return found["codes"], [line for line in done.stderr.splitlines() if line.startswith("error:")], found["heavy"]


def test_a_read_only_store_and_a_read_only_shared_cache_are_refused_before_work(tmp_path, mnist_root):
    out, cache = tmp_path / "out", tmp_path / "cache"
    Tracker(uri=sqlite_uri(out / "mlflow.db"), experiment="capsbench", artifact_root=out / "mlartifacts").open()
    (out / "mlflow.db").chmod(0o444)
    cache.mkdir()
    (cache / "kept.ckpt").write_bytes(b"a checkpoint another output directory trained")
    cache.chmod(0o555)
    before = sorted(p.name for p in out.iterdir())
    codes, errors, heavy = as_a_user(
        [*RUN, f"data.root={mnist_root}", f"output_dir={out}"],
        *[[*RUN, f"data.root={mnist_root}", f"output_dir={tmp_path / name}", f"cache_dir={cache}"] for name in "ab"],
        cwd=tmp_path)
    assert codes == [2, 2, 2] and heavy == [], errors
    assert errors[0] == (f"error: the MLflow store's file {out / 'mlflow.db'} is read-only, so no run could be logged: "
                         "make it writable, choose another tracking.uri= or output_dir=, or set "
                         "tracking.enabled=false to run without MLflow")
    assert errors[1:] == [f"error: cache_dir {cache} is not writable: read-only or not yours; choose another "
                          "cache_dir= or fix its permissions"] * 2
    assert sorted(p.name for p in out.iterdir()) == before and not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists() and [p.name for p in cache.iterdir()] == ["kept.ckpt"]


ENVIRONMENT = """
import json, sys
from conftest import make_splits
from capsbench.cli import app
from capsbench.run import execute

execute.load_data = lambda dataset, data: make_splits()
codes = []
for args in json.loads(sys.argv[1]):
    try:
        app(args, prog_name="capsbench")
    except SystemExit as exc:
        codes.append(exc.code or 0)
print(json.dumps(codes))
"""


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_no_home_lang_c_an_odd_path_stdin_closed_and_stdout_piped(tmp_path, mnist_root):
    out = tmp_path / "runs? #2 50%41 späť"
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "MLFLOW_TRACKING_URI")}
    env.update(LANG="C", LC_ALL="C", PYTHONPATH=str(REPO / "tests"))
    done = subprocess.run([sys.executable, "-c", ENVIRONMENT,
                           json.dumps([[*RUN, f"data.root={mnist_root}", f"output_dir={out}"],
                                       ["report", f"output_dir={out}"]])],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: os.close(0))  # noqa: PLW1509 -- no stdin at all, not an empty one
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[0, 0]", done.stderr
    assert "Traceback" not in done.stderr
    assert f"latest report's copy: {out / 'report'}/" in done.stdout and (out / "report" / "report.md").is_file()
    assert (out / "mlflow.db").is_file() and (out / "accuracy" / "table.md").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no stray folder named with the percent-encoded path


PAUSED_RUN = """
import sys, time
from pathlib import Path
import sqlalchemy

marker = Path(sys.argv[1])


def pause(conn, cursor, statement, parameters, context, executemany):
    # inside the run's first write of params: the store is locked by it
    if statement.lstrip().upper().startswith("INSERT INTO PARAMS") and not marker.exists():
        marker.touch()
        time.sleep(300)


sqlalchemy.event.listen(sqlalchemy.engine.Engine, "after_cursor_execute", pause)
sys.argv = ["capsbench", *sys.argv[2:]]
from capsbench.__main__ import main

main()
"""


def logged(out: Path) -> None:
    """A finished `capsbench run suite=accuracy` of fixed records in <out>/mlflow.db (no training)."""
    cfg = compose(["suite=accuracy", "budget=smoke", "device=cpu", "threads=1", f"output_dir={out}"])
    tracker = Tracker(uri=sqlite_uri(out / "mlflow.db"), experiment="capsbench", artifact_root=out / "mlartifacts")
    tags = {"suite": "accuracy", "budget": "smoke", "version.capsbench": __version__, "code.hash": "c" * 64}
    parent = tracker.start_parent("accuracy-smoke", flatten(to_dict(cfg)), tags, to_yaml(cfg))
    for model in ("capsnet", "cnn_sabour", "cnn_9x9"):
        spec = UnitSpec("accuracy", model, 0, {}, {"dataset": "mnist", "threads": 1, "data": {}})
        records = [r for r in accuracy() if (r["model"], r["seed"]) == (model, 0)]
        tracker.log_unit(parent, UnitResult(key=spec.key, spec=spec, status="done", records=records,
                                            params={"model_args.width": 8}), tags,
                         SUITES.get("accuracy").sweep_columns, reused=False)
    paths = write_suite(out / "accuracy", [r for r in accuracy() if r["seed"] == 0], SUITES.get("accuracy")).paths
    tracker.finish_parent(parent, {}, [paths["records.csv"]])


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_two_reports_while_a_run_writes_the_same_store(tmp_path, mnist_root):
    logged(tmp_path)
    marker = tmp_path / "paused"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    run = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, str(marker), *RUN, f"data.root={mnist_root}",
                            f"output_dir={tmp_path}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.1)
    reports = [subprocess.Popen([str(SCRIPT), "report", f"output_dir={tmp_path}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for report in reports:
        stdout, stderr = report.communicate(timeout=300)
        assert report.returncode == 0 and "Traceback" not in stderr, stderr
        assert f"latest report's copy: {tmp_path / 'report'}/" in stdout
    assert "| capsnet" in (tmp_path / "report" / "accuracy" / "table.md").read_text()
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 143 and "1 open MLflow run(s) marked KILLED" in stderr, stderr
    client = MlflowClient(sqlite_uri(tmp_path / "mlflow.db"))
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 4 + ["KILLED"]


def test_the_checkpoint_cache_deleted_during_the_attacks_loses_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    real = UnitAttacks.run

    def cache_deleted(self, *args, **kwargs):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # another job clears the cache mid-measurement
        return real(self, *args, **kwargs)

    monkeypatch.setattr(UnitAttacks, "run", cache_deleted)
    cfg = compose(["suite=robustness", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1",
                   "models=[cnn_9x9]", "params.attacks=[fgsm]", f"output_dir={tmp_path}",
                   f"cache_dir={tmp_path / 'cache'}"])
    result = driver.run_suite(cfg)
    assert not result.missing and result.records and not (tmp_path / "cache").exists()
    client = MlflowClient(sqlite_uri(tmp_path / "mlflow.db"))
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
    again = driver.run_suite(cfg)  # the finished unit is kept: nothing is measured or trained again
    assert again.records == result.records and not (tmp_path / "cache").exists()
