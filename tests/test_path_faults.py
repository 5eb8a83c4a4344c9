"""Paths that cannot be used, each refused before work with one line (exit 2) and nothing written: a symbolic-link
loop in any path setting (output_dir, data.root, cache_dir, weights.<model>, a SQLite tracking.uri), a name too long
for the file system, and an MLflow store that is a directory."""

import pytest
from typer.testing import CliRunner

from capsbench.cli import app

RUN = ["run", "suite=accuracy", "budget=smoke", "models=[cnn_9x9]", "device=cpu"]


@pytest.fixture
def loop(tmp_path):
    """Two links that point at each other."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


def refused(result, said: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith(f"error: {said}"), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("key", ["output_dir", "data.root", "cache_dir", "weights.cnn_9x9", "tracking.uri"])
def test_a_symlink_loop_in_a_path_setting_is_one_line_before_work(tmp_path, mnist_root, loop, key):
    value = f"sqlite:///{loop}/mlflow.db" if key == "tracking.uri" else str(loop)
    settings = {"output_dir": str(tmp_path / "out"), "data.root": str(mnist_root), key: value}
    result = CliRunner().invoke(app, [*RUN, *(f"{k}={v}" for k, v in settings.items())])
    named = f"the MLflow store {loop}/mlflow.db" if key == "tracking.uri" else f"{key} {loop}"
    refused(result, f"{named} cannot be followed: a symbolic link")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


@pytest.mark.parametrize("command", [["list", "checkpoints", "cache_dir={loop}"], ["report", "output_dir={loop}"]])
def test_listing_and_reporting_through_a_symlink_loop_is_one_line(tmp_path, loop, command):
    result = CliRunner().invoke(app, [a.replace("{loop}", str(loop)) for a in command])
    refused(result, f"{'cache_dir' if command[0] == 'list' else 'output_dir'} {loop} cannot be followed")


@pytest.mark.parametrize("command", [RUN, ["report"]])
def test_a_store_that_is_a_directory_is_one_line_before_work(tmp_path, mnist_root, command):
    (tmp_path / "mlflow.db").mkdir()
    result = CliRunner().invoke(app, [*command, f"output_dir={tmp_path}", *([f"data.root={mnist_root}"]
                                                                            if command is RUN else [])])
    refused(result, f"the MLflow store {tmp_path / 'mlflow.db'} is a directory, not a SQLite file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


def test_a_name_too_long_for_the_file_system_is_one_line_quoted_short(tmp_path, mnist_root):
    out = tmp_path / ("a" * 300)
    result = CliRunner().invoke(app, [*RUN, f"data.root={mnist_root}", f"output_dir={out}"])
    refused(result, f"output_dir {str(out)[:60]}... ({len(str(out)):,} characters) cannot be used: File name too long")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("blocked, status", [pytest.param("accuracy/units", 3, marks=pytest.mark.slow), ("runs", 2)])
def test_a_file_where_an_output_folder_belongs_is_one_line(tmp_path, mnist_root, monkeypatch, blocked, status):
    """A file named like the unit store's folder (found when the first unit's result is kept: exit 3) or the run
    folders' (found before any unit: exit 2): named, never a FileExistsError traceback."""
    from conftest import make_splits

    from capsbench.run import execute

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    out = tmp_path / "out"
    (out / blocked).parent.mkdir(parents=True, exist_ok=True)
    (out / blocked).write_text("not a folder")
    result = CliRunner().invoke(app, [*RUN, "train.epochs=1", "threads=1", "tracking.enabled=false",
                                      f"data.root={mnist_root}", f"output_dir={out}"])
    assert result.exit_code == status, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot create the folder "), result.output
    assert f": {out / blocked} is a file where a folder belongs; move it away" in errors[0]
    assert "Traceback" not in result.output
