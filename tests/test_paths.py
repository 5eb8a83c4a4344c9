"""Paths are paths: store URIs built from paths parse back to the same file with SQLAlchemy (what
MLflow opens them with), an output directory named with '?', '%' or a space keeps its MLflow database inside it, and
printed commands quote their arguments."""

import re
import shlex

import pytest
from conftest import make_splits
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.run import execute
from capsbench.util.uris import remote_address, sqlite_path, sqlite_uri, ui_command


@pytest.mark.parametrize("name", ["plain", "runs?v=2", "50% done", "a#b@c:d", "späť"])
def test_sqlite_uris_round_trip_through_sqlalchemy(tmp_path, name):
    path = tmp_path / name / "mlflow.db"
    uri = sqlite_uri(path)
    assert make_url(uri).database == str(path) and sqlite_path(uri) == path
    assert sqlite_path(uri + "?mode=ro") == path and sqlite_path("postgresql://h/db") is None


def test_remote_addresses():
    assert remote_address("http://127.0.0.1:5000") == ("127.0.0.1", 5000)
    assert remote_address("https://mlflow.example.org") == ("mlflow.example.org", 443)
    assert remote_address("postgresql+psycopg2://u:p@db.example.org/mlflow") == ("db.example.org", 5432)
    assert remote_address("sqlite:////tmp/m.db") is None and remote_address("databricks") is None


def test_an_output_dir_with_a_question_mark_and_a_space_keeps_its_store(tmp_path, monkeypatch, mnist_root):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    out = tmp_path / "runs?v=2 final"
    result = CliRunner().invoke(app, ["run", "suite=accuracy", "budget=smoke", "train.epochs=1", "device=cpu",
                                      "threads=1", "models=[cnn_9x9]", f"data.root={mnist_root}", f"output_dir={out}"])
    assert result.exit_code == 0, result.output
    assert (out / "mlflow.db").is_file() and not (tmp_path / "runs").exists()
    (hint,) = [line for line in result.output.splitlines() if "browse: " in line]
    command, _, address = hint.split("browse: ", 1)[1].partition(", then open ")
    assert shlex.split(command) == ["uv", "run", "mlflow", "ui", "--backend-store-uri", sqlite_uri(out / "mlflow.db")]
    assert re.fullmatch(r"http://127\.0\.0\.1:5000/#/experiments/\d+/runs", address)  # the runs table, not GenAI
    assert ui_command("sqlite:////a b/m.db") == "uv run mlflow ui --backend-store-uri 'sqlite:////a b/m.db'"
