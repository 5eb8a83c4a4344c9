"""MLflow while it runs and the same thread count on every launcher: a unit's run is
RUNNING with its curves while it trains, ends with its true duration, carries n and intervals beside each accuracy,
its learning rate, the driver's host and pid, and its checkpoint, from which the model is rebuilt; SLURM jobs stream
through an events file; every unit runs with the thread count its spec fixes. Synthetic images stand in for MNIST."""

import json
from pathlib import Path

import pytest
import torch
from composing import compose
from conftest import make_splits
from mlflow.tracking import MlflowClient

from capsbench.models import create_model
from capsbench.run import driver, execute
from capsbench.run.launchers import remote
from capsbench.run.plan import plan
from capsbench.run.store import UnitStore
from capsbench.run.units import UnitEvent
from capsbench.tracking import download_checkpoint
from capsbench.train.step import auto_threads

SMOKE = ["suite=accuracy", "budget=smoke", "train.epochs=2", "device=cpu", "models=[cnn_9x9]"]


@pytest.fixture
def synthetic(monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())


def test_unit_runs_stream_while_they_train_and_end_with_their_true_duration(tmp_path, synthetic, monkeypatch):
    cfg = compose([*SMOKE, f"output_dir={tmp_path}", "threads=1"])
    client = MlflowClient(cfg.tracking.uri)
    seen = []  # (status, val/accuracy steps) of the unit's run right after each epoch event was logged
    real = driver.LiveUnits.on_event

    def look(self, event):
        real(self, event)
        if event.kind == "epoch":
            run_id = self.runs[event.key]
            history = client.get_metric_history(run_id, "val/accuracy")
            seen.append((client.get_run(run_id).info.status, [m.step for m in history]))

    monkeypatch.setattr(driver.LiveUnits, "on_event", look)
    driver.run_suite(cfg)
    assert seen == [("RUNNING", [1]), ("RUNNING", [1, 2])]  # curves arrive while the unit runs
    (parent,) = [r for r in client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
                 if "mlflow.parentRunId" not in r.data.tags]
    (unit,) = client.search_runs([parent.info.experiment_id], filter_string="tags.model = 'cnn_9x9'")
    info, data = unit.info, unit.data
    curve = client.get_metric_history(info.run_id, "val/accuracy")
    assert info.start_time < curve[0].timestamp <= curve[1].timestamp < info.end_time  # streamed, not at the end
    (spec,) = plan(cfg)
    measured = UnitStore(tmp_path).load(spec).seconds  # the unit's own clock, from loading data to its figures
    assert (info.end_time - info.start_time) / 1000 >= measured - 0.002  # its true duration, not one call's ms
    assert [(m.step, m.value) for m in client.get_metric_history(info.run_id, "train/lr")] == [
        (1, pytest.approx(0.003)), (2, pytest.approx(0.003 * 0.96))]  # smoke: lr 0.003 decayed by 0.96 per epoch
    for name in ("test_accuracy", "test_error"):
        assert data.metrics[f"{name}.n"] == 32
        assert data.metrics[f"{name}.ci_low"] <= data.metrics[name] <= data.metrics[f"{name}.ci_high"]
    assert data.tags["host"] and data.tags["pid"] and data.tags["process.start"] and data.params["threads"] == "1"
    assert data.tags["code.hash"] == parent.data.tags["code.hash"]


def test_the_checkpoint_is_logged_once_and_rebuilds_the_model(tmp_path, synthetic):
    cfg = compose([*SMOKE, f"output_dir={tmp_path}", "threads=1"])
    driver.run_suite(cfg)
    driver.run_suite(compose([*SMOKE, f"output_dir={tmp_path}", "threads=1", "remeasure=true"]))
    client = MlflowClient(cfg.tracking.uri)
    first, second = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id],
                                       filter_string="tags.model = 'cnn_9x9'", order_by=["attributes.start_time ASC"])
    assert first.data.tags["checkpoint.logged"] == first.data.params["checkpoint.key"]
    assert second.data.tags["checkpoint.run"] == first.info.run_id and "checkpoint.logged" not in second.data.tags
    path = download_checkpoint(cfg.tracking.uri, second.info.run_id, tmp_path / "download")
    assert path.read_bytes() == Path(first.data.params["checkpoint.path"]).read_bytes()
    payload = torch.load(path, weights_only=True)
    model = create_model("cnn_9x9", **payload["meta"]["identity"]["model_args"])
    model.load_state_dict(payload["state_dict"])  # strict: every weight of the unit's model is in the store
    assert model.eval()(make_splits().test_x[:8].float() / 255).scores.shape == (8, 10)


def test_every_launcher_gets_the_spec_s_thread_count(tmp_path, synthetic):
    """threads=null is fixed by the driver (its auto_threads) before planning, so every unit's spec, the Ray tasks'
    CPUs and the unit's MLflow params carry the same number."""
    cfg = compose([*SMOKE, f"output_dir={tmp_path}", "tracking.enabled=false"])
    assert cfg.threads is None
    driver.run_suite(cfg)
    assert cfg.threads == auto_threads() and plan(cfg)[0].config["threads"] == auto_threads()
    ray_tasks = pytest.importorskip("capsbench.run.launchers.ray_tasks")
    options = ray_tasks.RayLauncher(compose([*SMOKE, f"output_dir={tmp_path}", "threads=3"])).task_options()
    assert options["num_cpus"] == 3
    given = compose([*SMOKE, f"output_dir={tmp_path}", "threads=3", "ray.cpus_per_unit=1"])
    assert ray_tasks.RayLauncher(given).task_options()["num_cpus"] == 1


def test_slurm_events_are_read_as_they_are_appended(tmp_path):
    path = tmp_path / "events" / "k.jsonl"
    writer, reader = remote.EventFile(path), remote.EventFile(path)
    assert reader.read_new() == []
    writer(UnitEvent("k", "started", time=1.0))
    writer(UnitEvent("k", "epoch", {"epoch": 1, "val_accuracy": 0.5}, time=2.0))
    with path.open("a") as fh:
        fh.write(json.dumps(UnitEvent("k", "epoch", {"epoch": 2}).to_dict())[:20])  # a line being written
    assert [(e.kind, e.data) for e in reader.read_new()] == [("started", {}), ("epoch", {"epoch": 1,
                                                                                        "val_accuracy": 0.5})]
    assert reader.read_new() == []  # the partial line waits until it is complete
