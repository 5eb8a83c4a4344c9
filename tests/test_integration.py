"""End to end on real MNIST: `capsbench run suite=accuracy budget=smoke` writes records, tables and MLflow runs."""

import csv
import os
import signal
import time

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.run import execute


def run_cli(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def smoke_args(tmp_path, mnist_root):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return uri, [
        "run",
        "suite=accuracy",
        "budget=smoke",
        "models=[capsnet,cnn_sabour,cnn_9x9]",
        f"output_dir={tmp_path / 'out'}",
        f"data.root={mnist_root}",
        "data.download=false",
        f"tracking.uri={uri}",
        "device=cpu",
    ]


@pytest.mark.slow
def test_accuracy_smoke_end_to_end(tmp_path, smoke_args):
    uri, args = smoke_args
    result = run_cli(args)
    out = tmp_path / "out" / "accuracy"
    assert "| capsnet |" in result.output

    with open(out / "records.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["model"] for r in rows} == {"capsnet", "cnn_sabour", "cnn_9x9"}
    assert {r["metric"] for r in rows} == {"test_accuracy", "test_error"}
    for r in rows:
        if r["metric"] == "test_accuracy":
            assert float(r["value"]) > 50.0, f"{r['model']} at {r['value']} % is not well above chance (10 %)"
    for name in ("table.md", "table.tex", "table-accuracy.csv", "config.yaml"):
        assert (out / name).stat().st_size > 0
    table = (out / "table.md").read_text()
    assert "nothing is bold: one seed compares these weights" in table and "over 500 test images" in table
    assert "| capsnet |" in table and "0.25 ± 0.005 [1]" in table  # Sabour's Table 1 beside the measured error
    assert "arXiv:1710.09829" in table

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("capsbench")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["budget"] == "smoke" and parent.data.params["train.epochs"] == "3"
    assert parent.data.tags["budget"] == "smoke" and parent.data.tags["version.mlflow"].startswith("3.")
    assert "git.commit" in parent.data.tags and "device.name" in parent.data.tags
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"records.csv", "table.md", "table.tex", "table-accuracy.csv", "config.yaml"} <= artifacts
    for child in children:
        assert child.info.status == "FINISHED"
        assert 50.0 < child.data.metrics["test_accuracy"] <= 100.0
        assert child.data.params["checkpoint.cached"] == "False"
        assert int(child.data.params["checkpoint.train_threads"]) >= 1

    # Second invocation: every unit is reused as measured; with remeasure=true every checkpoint comes from the cache.
    def newest_children():
        runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
        newest_parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
        return [r for r in runs if r.data.tags.get("mlflow.parentRunId") == newest_parent.info.run_id]

    run_cli(args)
    reused = newest_children()
    assert len(reused) == 3 and all(r.data.tags["unit.reused"] == "true" for r in reused)
    run_cli([*args, "remeasure=true"])
    cached = newest_children()
    assert len(cached) == 3 and all(r.data.params["checkpoint.cached"] == "True" for r in cached)
    assert all(r.data.tags["unit.reused"] == "false" for r in cached)


@pytest.mark.slow
def test_interrupted_run_is_marked_killed_and_next_run_is_clean(tmp_path, smoke_args, monkeypatch):
    uri, args = smoke_args
    real_obtain = execute.obtain_model
    calls = []

    def interrupt_on_second_model(cfg, name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:  # Ctrl-C as a terminal sends it (a KeyboardInterrupt that no signal sent is a code error)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises here
        return real_obtain(cfg, name, *args, **kwargs)

    monkeypatch.setattr(execute, "obtain_model", interrupt_on_second_model)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130 and "interrupted" in result.output
    assert not (tmp_path / "out" / "accuracy" / "table.md").exists()
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "KILLED"
    assert sorted(r.info.status for r in runs) == [
        "FINISHED",
        "KILLED",
        "KILLED",
    ]  # model 1's unit logged whole; model 2's unit had started (its run is open) and is cut, with the parent

    monkeypatch.setattr(execute, "obtain_model", real_obtain)
    run_cli(args)
    assert (tmp_path / "out" / "accuracy" / "table.md").exists()
