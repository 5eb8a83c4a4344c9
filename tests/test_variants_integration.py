"""End to end on real MNIST: the capsule variants and the AvgPool baseline train in the smoke budget."""

import csv

import pytest
from typer.testing import CliRunner

from capsbench.cli import app

VARIANTS = ("capsnet_em", "effcapsnet", "srcapsnet", "cnn_avgpool")


@pytest.mark.slow
def test_variants_learn_mnist_in_the_smoke_budget(tmp_path, mnist_root):
    args = ["run", "suite=accuracy", "budget=smoke", f"models=[{','.join(VARIANTS)}]", f"output_dir={tmp_path}",
            f"data.root={mnist_root}", "data.download=false", "tracking.enabled=false", "device=cpu"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with open(tmp_path / "accuracy" / "records.csv") as fh:
        acc = {r["model"]: float(r["value"]) for r in csv.DictReader(fh) if r["metric"] == "test_accuracy"}
    assert set(acc) == set(VARIANTS)
    for model, value in acc.items():
        assert value > 30.0, f"{model} at {value} % after the smoke budget is barely above chance (10 %)"
