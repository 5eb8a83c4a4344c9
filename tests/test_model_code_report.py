"""An external model's source is a code identity like capsbench's own: its runs carry the hash of that source, and
`capsbench report` refuses to put numbers measured with two versions of it in one table, naming both; code= picks one.
Synthetic images stand in for MNIST; the user's module is edited between two seeds, as a user would."""

import sys

import pytest
from composing import compose
from conftest import make_splits
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.run import driver, execute, model_trial
from capsbench.run.plan import plan
from capsbench.util.uris import sqlite_uri

SOURCE = '''"""A user's model, edited between seeds."""
import torch
from torch import nn


class Fixme(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(28 * 28, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(x.flatten(1)))
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "uxmodel.py"
    path.write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    splits = lambda dataset, data: make_splits()  # noqa: E731
    monkeypatch.setattr(execute, "load_data", splits)
    monkeypatch.setattr(model_trial, "load_data", splits)
    yield path
    sys.modules.pop("uxmodel", None)


def measure(out, seed: int) -> str:
    """`capsbench run` of seed `seed` of the user's model; the hash of its source, as its unit saw it."""
    cfg = compose(["suite=accuracy", "budget=smoke", "train.epochs=1", "device=cpu", "threads=1", f"seeds=[{seed}]",
                   "register.ux=uxmodel:Fixme", "models=[ux]", f"output_dir={out}"])
    result = driver.run_suite(cfg)
    assert not result.missing
    client = MlflowClient(sqlite_uri(out / "mlflow.db"))
    assert client.get_run(result.parent_run_id).data.tags["code.model.ux"] == plan(cfg)[0].config["external"]["source"]
    return plan(cfg)[0].config["external"]["source"]


def test_seeds_of_two_versions_of_an_external_models_source_are_never_mixed(tmp_path, user):
    relu = measure(tmp_path, 0)
    user.write_text(SOURCE.replace("torch.relu(", "torch.tanh("))  # the user changed the model between seeds
    tanh = measure(tmp_path, 1)
    assert relu != tanh
    result = CliRunner().invoke(app, ["report", "suite=accuracy", f"output_dir={tmp_path}"])
    assert result.exit_code == 2, result.output
    (line,) = [text for text in result.output.splitlines() if text.startswith("error:")]
    assert line.startswith("error: no suite can be reported: suite 'accuracy': model 'ux' (uxmodel:Fixme) was "
                           f"measured with 2 versions of its source: {relu[:12]} (latest run "), line
    assert f"; {tanh[:12]} (latest run " in line and f"choose one with code={tanh[:12]} (or narrow the dates" in line
    picked = CliRunner().invoke(app, ["report", "suite=accuracy", f"code={relu[:12]}", f"output_dir={tmp_path}"])
    assert picked.exit_code == 0, picked.output
    assert "- one seed" in (tmp_path / "report" / "accuracy" / "table.md").read_text()
