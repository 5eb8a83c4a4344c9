"""A run never replaces another run's outputs: each writes its own folder under <output_dir>/runs/<date>/<time>/, and
<output_dir>/<suite>/ holds a copy of the latest run's files at the same paths as before; the unit store, checkpoints
and MLflow store stay shared; the default output folder is not results/, and a default run leaves a clone clean."""

import subprocess
from datetime import datetime, timezone

import pytest
from composing import compose
from conftest import REPO, make_splits
from omegaconf import OmegaConf

from capsbench.run import driver, execute
from capsbench.util.folders import new_run_folder, publish_latest


def test_two_runs_of_different_settings_both_keep_their_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    common = ["suite=accuracy", "budget=smoke", f"output_dir={tmp_path}", "device=cpu", "models=[cnn_9x9]",
              "tracking.enabled=false"]
    first = driver.run_plan(driver.suite_plan([compose([*common, "train.epochs=1"])]))
    second = driver.run_plan(driver.suite_plan([compose([*common, "train.epochs=2"])]))
    tables = [r.sections[0].paths["table.md"] for r in (first, second)]
    assert tables[0].parent != tables[1].parent and all(t.is_file() for t in tables)
    assert [t.relative_to(tmp_path).parts[:1] for t in tables] == [("runs",), ("runs",)]
    assert OmegaConf.load(tables[0].parent / "config.yaml").train.epochs == 1  # the first run's files are intact
    latest = tmp_path / "accuracy"
    assert second.sections[0].latest == latest
    assert (latest / "table.md").read_text() == tables[1].read_text()
    assert OmegaConf.load(latest / "config.yaml").train.epochs == 2
    assert len(list((latest / "units").glob("*.json"))) == 2 and (tmp_path / "checkpoints").is_dir()  # shared


def test_the_latest_copy_replaces_only_what_the_previous_copy_put_there(tmp_path):
    when = datetime(2026, 11, 21, 14, 30, 5, tzinfo=timezone.utc)
    a, b = new_run_folder(tmp_path, when), new_run_folder(tmp_path, when)
    assert a.name == "14-30-05" and b.name == "14-30-05-2" and a.parent.name == "2026-11-21"
    (a / "table-old.csv").write_text("old")
    (a / "table.md").write_text("a")
    (b / "table.md").write_text("b")
    latest = tmp_path / "accuracy"
    (latest / "units").mkdir(parents=True)
    (latest / "units" / "k.json").write_text("{}")
    publish_latest(a, latest)
    publish_latest(b, latest)
    assert (latest / "table.md").read_text() == "b" and not (latest / "table-old.csv").exists()
    assert (latest / "units" / "k.json").exists()  # the unit store is never touched


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_a_default_run_in_a_clone_leaves_git_status_clean(tmp_path, cli_probe, mnist_root):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    probe = cli_probe(["run", "suite=accuracy", "budget=smoke", "models=[cnn_9x9]", "train.epochs=1", "device=cpu",
                       "threads=1", f"data.root={mnist_root}"], cwd=clone)
    assert probe.code == 0, probe.stderr
    assert (clone / "outputs" / "accuracy" / "table.md").is_file() and not (clone / "results" / "accuracy").exists()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, check=True,
                            capture_output=True, text=True).stdout
    assert status == "", status
