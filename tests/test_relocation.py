"""An output folder copied or moved whole stays self-contained: `report` reads the artifacts beside its store, and
the next run rewrites the store's artifact locations so that it writes only inside the folder (MLflow keeps them
absolute). A store shared by several output folders is left as it is."""

import shutil

import pytest
from mlflow.tracking import MlflowClient
from test_report_faults import invocation, report

from capsbench.tracking.relocation import moved_artifacts
from capsbench.util.uris import sqlite_uri

pytestmark = pytest.mark.slow  # each test builds an MLflow store and logs runs into it


def artifact_uris(out) -> set[str]:
    client = MlflowClient(sqlite_uri(out / "mlflow.db"))
    experiment = client.get_experiment_by_name("capsbench")
    runs = client.search_runs([experiment.experiment_id])
    return {experiment.artifact_location} | {r.info.artifact_uri for r in runs}


def test_a_copied_and_a_moved_output_folder_report_the_same_and_write_only_inside(tmp_path):
    out = tmp_path / "out"
    invocation(out, [0])
    assert report(out).exit_code == 0
    table = (out / "report" / "accuracy" / "table.md").read_text()
    shutil.copytree(out, tmp_path / "copy")
    out.rename(tmp_path / "moved")
    for folder in ("moved", "copy"):  # the folder the store names is gone: only the artifacts beside it remain
        again = report(tmp_path / folder)
        assert again.exit_code == 0, again.output
        assert (tmp_path / folder / "report" / "accuracy" / "table.md").read_text() == table
    invocation(tmp_path / "copy", [1])  # a run into the copy: the store now points inside it
    assert all(uri.startswith((tmp_path / "copy" / "mlartifacts").as_uri()) for uri in artifact_uris(tmp_path / "copy"))
    assert not out.exists() and report(tmp_path / "copy").exit_code == 0


def test_a_store_whose_artifacts_lie_elsewhere_is_not_moved(tmp_path):
    """A shared store (tracking.uri=) with each run's artifacts in its own output folder: nothing beside the store."""
    invocation(tmp_path / "out", [0])
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.move(tmp_path / "out" / "mlflow.db", shared / "mlflow.db")
    experiment = MlflowClient(sqlite_uri(shared / "mlflow.db")).get_experiment_by_name("capsbench")
    assert moved_artifacts(sqlite_uri(shared / "mlflow.db"), experiment.experiment_id) is None
