"""End to end on real MNIST: `capsbench run suite=overlap budget=smoke` writes records, tables, the figure and MLflow
runs."""

import csv

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from capsbench.cli import app


@pytest.mark.slow
def test_overlap_smoke_end_to_end(tmp_path, mnist_root):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "run",
        "suite=overlap",
        "budget=smoke",
        "models=[capsnet,cnn_multimnist]",
        f"output_dir={tmp_path / 'out'}",
        f"data.root={mnist_root}",
        "data.download=false",
        f"tracking.uri={uri}",
        "device=cpu",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "overlap"
    assert "| capsnet |" in result.output and "| cnn_multimnist |" in result.output

    with open(out / "records.csv") as fh:
        rows = {(r["model"], r["metric"]): float(r["value"]) for r in csv.DictReader(fh)}
    for model in ("capsnet", "cnn_multimnist"):
        assert rows[(model, "both_correct_accuracy")] <= rows[(model, "per_digit_accuracy")]
        assert 70.0 < rows[(model, "box_overlap")] < 80.0  # the shift-4 protocol: 72.6 % for 20x20 boxes
    # two smoke epochs on 2,000 pairs: far from the paper, but above chance (per digit 20 %, single digit 10 %)
    assert rows[("capsnet", "per_digit_accuracy")] > 25.0 and rows[("capsnet", "single_digit_accuracy")] > 25.0
    assert (out / "figures" / "segmentation-capsnet-s0.png").stat().st_size > 0
    assert not list((out / "figures").glob("*cnn_multimnist*"))  # CNNs have no reconstructions

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    knobs = {
        k: parent.data.params[f"params.{k}"]
        for k in ("max_shift", "canvas", "merge", "test_pairs_per_digit", "test_seed")
    }
    assert knobs == {
        "max_shift": "4",
        "canvas": "36",
        "merge": "saturating_sum",
        "test_pairs_per_digit": "1",
        "test_seed": "1710",
    }
    capsnet_run = next(r for r in runs if r.data.tags.get("model") == "capsnet")
    assert {a.path for a in client.list_artifacts(capsnet_run.info.run_id, "figures")} >= {
        "figures/segmentation-capsnet-s0.png"
    }
    assert "both_correct_accuracy" in capsnet_run.data.metrics
