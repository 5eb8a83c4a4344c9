"""End to end on real MNIST: `capsbench run suite=efficiency budget=smoke` writes its tables and MLflow runs."""

import csv

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from capsbench.cli import app


@pytest.mark.slow
def test_efficiency_smoke_end_to_end(tmp_path, mnist_root):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["run", "suite=efficiency", "budget=smoke", f"output_dir={tmp_path / 'out'}", f"data.root={mnist_root}",
            "data.download=false", f"tracking.uri={uri}", "device=cpu", "params.memory=true", "models=[capsnet]"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with open(tmp_path / "out" / "efficiency" / "records.csv") as fh:
        rows = list(csv.DictReader(fh))
    peaks = [r for r in rows if r["metric"] == "peak_memory"]
    assert {(r["mode"], float(r["batch"])) for r in peaks} == {("infer", 1), ("infer", 8), ("train", 1), ("train", 8)}
    assert all(float(r["value"]) > 0 for r in peaks)
    assert any(r["metric"] == "routing_iteration_latency" for r in rows)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert child.info.status == "FINISHED" and "macs.total" in child.data.metrics  # named per coordinate (part)
    assert "checkpoint.key" not in child.data.params  # nothing was trained
