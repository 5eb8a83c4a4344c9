"""End to end on real MNIST: `capsbench run suite=affine budget=smoke` writes records, tables, sweep and worst-case
plots and MLflow runs."""

import csv
import shutil

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.suites.affine import SWEEPS


def run_records(args, out):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with open(out / "records.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_affine_smoke_end_to_end(tmp_path, mnist_root):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "run",
        "suite=affine",
        "budget=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"data.root={mnist_root}",
        "data.download=false",
        f"tracking.uri={uri}",
        "device=cpu",
    ]
    out = tmp_path / "out" / "affine"
    rows = run_records(args, out)
    models = {"capsnet", "cnn_sabour", "cnn_9x9"}
    assert {r["model"] for r in rows} == models
    affnist = [r for r in rows if r["metric"] == "affnist_accuracy"]
    [test_set] = {r["test_set"] for r in affnist}
    assert test_set.startswith("affNIST-style sha256:"), (
        "no real affNIST under the MNIST root: the generated set is used"
    )
    for model in models:
        sweeps = [r for r in rows if r["model"] == model and r["metric"] == "sweep_accuracy"]
        assert {r["transform"] for r in sweeps} == set(SWEEPS) and len(sweeps) == 12
        centred = next(float(r["value"]) for r in rows if r["model"] == model and r["metric"] == "centred_accuracy")
        assert 0.0 <= centred <= 100.0
    capsnet = next(float(r["value"]) for r in rows if r["model"] == "capsnet" and r["metric"] == "centred_accuracy")
    assert capsnet > 20.0, f"capsnet at {capsnet} % on centred digits has not learnt (chance is 10 %)"
    worst = [r for r in rows if r["metric"] == "worst_affine_accuracy"]
    assert {r["grid"] for r in worst} == {"rotation=-30:30:3 translation=-3:3:3 scale=1:1:1"} and len(worst) == 3 * 2
    for name in (
        "table.md",
        "table.tex",
        "table-affnist.csv",
        "table-sweeps-rotation.csv",
        "table-worst_affine.csv",
        "sweeps.png",
        "worst_affine.png",
        "sweeps.pdf",
        "config.yaml",
    ):
        assert (out / name).stat().st_size > 0

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    digest = test_set.split(":")[1]  # metric names carry the test set, e.g. affnist_accuracy.affNIST-style sha256_<hex>
    assert len(children) == 3 and all(
        any(k.startswith("affnist_accuracy.") and digest in k for k in r.data.metrics) for r in children
    )
    assert all(r.data.params["checkpoint.cached"] == "False" for r in children)
    assert all(any(k.startswith("worst_affine_accuracy.max_rotation_30.rotation_-30_30_3") for k in r.data.metrics)
               for r in children)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert (
        parent.data.params["params.generator_seed"] == "0" and parent.data.params["params.max_rotation_deg"] == "20.0"
    )
    assert (parent.data.params["params.worst_rotation_steps"], parent.data.params["params.worst_images"]) == ("3", "50")

    # The generated set, built again from scratch, has the same content hash; checkpoints come from the cache.
    shutil.rmtree(tmp_path / "out" / "checkpoints" / "affnist_style")
    again = run_records(args, out)
    assert {r["test_set"] for r in again if r["metric"] == "affnist_accuracy"} == {test_set}
    assert [r["value"] for r in again] == [r["value"] for r in rows]
