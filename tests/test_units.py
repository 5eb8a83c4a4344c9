"""Units of work: the plan, their keys, the store of finished units, resuming after an interruption, failed units
reported and retried, and the MLflow runs the driver writes (read back through MlflowClient.search_runs)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from composing import compose
from conftest import make_splits
from mlflow.tracking import MlflowClient

from capsbench.run import driver, execute
from capsbench.run.plan import plan
from capsbench.run.store import UnitStore
from capsbench.run.units import UnitSpec
from capsbench.tracking import Tracker, metric_key

SMOKE = ["budget=smoke", "train.epochs=2", "device=cpu", "threads=1"]


def smoke(tmp_path, *extra, suite="accuracy"):
    return compose(
        [
            f"suite={suite}",
            *SMOKE,
            f"output_dir={tmp_path}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            "models=[cnn_9x9,capsnet]",
            *extra,
        ]
    )


@pytest.fixture
def synthetic(monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())


def test_plan_is_model_then_variant_then_seed_with_the_models_own_settings(tmp_path):
    units = plan(smoke(tmp_path, "seeds=[0,1]", "model_train.capsnet.lr=0.01"))
    assert [(u.model, u.seed) for u in units] == [("cnn_9x9", 0), ("cnn_9x9", 1), ("capsnet", 0), ("capsnet", 1)]
    assert units[2].config["train"]["lr"] == 0.01 and units[0].config["train"]["lr"] == 0.003
    assert set(units[2].config["model_args"]) == {"capsnet"}
    routing = plan(compose(["suite=routing", *SMOKE, f"output_dir={tmp_path}"]))
    assert [u.variant for u in routing] == [{"r": 1}, {"r": 2}, {"r": 3}]
    assert routing[0].config["model_args"]["capsnet"]["routing_iterations"] == 1


def test_unit_keys_follow_what_changes_the_records(tmp_path):
    (base,) = plan(smoke(tmp_path, "models=[cnn_9x9]"))
    (moved,) = plan(smoke(tmp_path / "elsewhere", "models=[cnn_9x9]", f"cache_dir={tmp_path / 'c'}"))
    (longer,) = plan(smoke(tmp_path, "models=[cnn_9x9]", "train.epochs=3"))
    assert base.key == moved.key and base.key != longer.key
    assert UnitSpec.from_dict(json.loads(json.dumps(base.to_dict()))) == base


def test_a_killed_run_keeps_its_finished_units_and_the_rerun_measures_only_the_rest(tmp_path, synthetic, monkeypatch):
    cfg = smoke(tmp_path)
    real = execute.execute
    calls = []

    def interrupt_second(spec, emit):
        calls.append(spec.model)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(spec, emit)

    monkeypatch.setattr(execute, "execute", interrupt_second)
    with pytest.raises(KeyboardInterrupt):
        driver.run_suite(cfg)
    assert len(list((tmp_path / "accuracy" / "units").glob("*.json"))) == 1
    assert not (tmp_path / "accuracy" / "table.md").exists()
    monkeypatch.setattr(execute, "execute", lambda spec, emit: calls.append(spec.model) or real(spec, emit))
    resumed = driver.run_suite(cfg)
    assert calls == ["cnn_9x9", "capsnet", "capsnet"]  # the finished cnn_9x9 unit was not measured again
    clean = driver.run_suite(smoke(tmp_path / "clean"))
    assert resumed.markdown == clean.markdown and resumed.records == clean.records
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parents = [
        r
        for r in client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    assert sorted(r.info.status for r in parents) == ["FINISHED", "KILLED"]


def test_remeasure_runs_every_unit_again(tmp_path, synthetic, monkeypatch):
    cfg = smoke(tmp_path, "models=[cnn_9x9]")
    driver.run_suite(cfg)
    calls = []
    real = execute.execute
    monkeypatch.setattr(execute, "execute", lambda spec, emit: calls.append(spec.model) or real(spec, emit))
    driver.run_suite(cfg)
    driver.run_suite(smoke(tmp_path, "models=[cnn_9x9]", "remeasure=true"))
    assert calls == ["cnn_9x9"]


def test_a_failed_unit_is_reported_missing_and_measured_on_the_next_run(tmp_path, synthetic, monkeypatch):
    cfg = smoke(tmp_path)
    real = execute.execute

    def broken_capsnet(spec, emit):
        if spec.model == "capsnet":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(spec, emit)

    monkeypatch.setattr(execute, "execute", broken_capsnet)
    (result,) = driver.run_suites([cfg])
    assert {r["model"] for r in result.records} == {"cnn_9x9"} and [m.spec.model for m in result.missing] == ["capsnet"]
    assert "MISSING accuracy/capsnet-mnist-s0: the unit failed (RuntimeError: CUDA error" in result.markdown
    monkeypatch.setattr(execute, "execute", real)
    (again,) = driver.run_suites([cfg])
    assert {r["model"] for r in again.records} == {"cnn_9x9", "capsnet"} and not again.missing


def test_unreadable_unit_files_are_moved_aside(tmp_path, synthetic):
    cfg = smoke(tmp_path, "models=[cnn_9x9]")
    driver.run_suite(cfg)
    (unit,) = plan(cfg)
    path = UnitStore(tmp_path).path(unit)
    path.write_text(path.read_text()[:100])
    assert UnitStore(tmp_path).load(unit) is None
    assert not path.exists() and list(path.parent.glob("*.corrupt-*"))


def test_mlflow_runs_read_back_with_names_statuses_tags_metrics_and_curves(tmp_path, synthetic):
    cfg = smoke(tmp_path, "models=[capsnet]", "seeds=[0,1]")
    driver.run_suite(cfg)
    client = MlflowClient(cfg.tracking.uri)  # not mlflow.set_tracking_uri: it exports MLFLOW_TRACKING_URI
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = sorted(
        (r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id), key=lambda r: r.info.run_name
    )
    assert parent.info.run_name.startswith("accuracy-smoke-capsnet-") and parent.info.status == "FINISHED"
    assert [c.info.run_name for c in children] == ["capsnet-mnist-s0", "capsnet-mnist-s1"]
    assert all(c.info.status == "FINISHED" for c in children)
    for key in (
        "model",
        "suite",
        "seed",
        "budget",
        "git.commit",
        "git.dirty",
        "version.capsbench",
        "unit.host",
        "unit.key",
    ):
        assert key in children[0].data.tags, key
    assert children[1].data.tags["seed"] == "1" and children[0].data.tags["unit.reused"] == "false"
    assert 0 <= children[0].data.metrics["test_accuracy"] <= 100
    mean = sum(c.data.metrics["test_accuracy"] for c in children) / 2
    assert parent.data.metrics["capsnet/test_accuracy"] == pytest.approx(mean)  # headline: mean over seeds
    curve = client.get_metric_history(children[0].info.run_id, "val/accuracy")
    assert [m.step for m in curve] == [1, 2]
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"table.md", "records.csv", "records.jsonl"}
    experiment = client.get_experiment_by_name("capsbench")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_metric_names_spell_out_their_coordinates():
    rec = {"metric": "robust_accuracy", "attack": "pgd", "eps": 0.1, "check": None, "value": 1.0}
    assert metric_key(rec, ("attack", "eps", "check")) == "robust_accuracy.pgd.eps_0.1"
    assert (
        metric_key({"metric": "affnist_accuracy", "test_set": "affNIST-style sha256:ab12"}, ("test_set",))
        == "affnist_accuracy.affNIST-style sha256_ab12"
    )


def test_runs_left_running_by_a_killed_process_are_marked_killed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tracker = Tracker(uri=uri, experiment="capsbench", artifact_root=tmp_path / "art")
    run_id = tracker.start_parent("accuracy-smoke", {}, {"suite": "accuracy"}, "")
    client = MlflowClient(uri)
    client.set_tag(run_id, "pid", str(orphan.pid))  # as if the orphan had written it
    client.set_tag(run_id, "process.start", "unknown")
    orphan.send_signal(signal.SIGKILL)
    orphan.wait()
    Tracker(uri=uri, experiment="capsbench", artifact_root=tmp_path / "art").open()
    run = client.get_run(run_id)
    assert run.info.status == "KILLED" and "was gone" in run.data.tags["capsbench.ended"]
    alive = tracker.start_parent("accuracy-smoke", {}, {"suite": "accuracy"}, "")  # ours, still running
    Tracker(uri=uri, experiment="capsbench", artifact_root=tmp_path / "art").open()
    assert client.get_run(alive).info.status == "RUNNING"


@pytest.mark.slow
def test_sigkill_after_the_first_unit_then_rerun(tmp_path, mnist_root):
    """A real process killed with SIGKILL after its first unit: the rerun measures only the second unit, the dead
    run is marked KILLED, and the final table equals that of an uninterrupted run."""
    args = [
        "run",
        "suite=accuracy",
        *SMOKE,
        "models=[cnn_9x9,cnn_sabour]",
        "data.train_subset=500",
        "data.val_subset=200",
        "data.test_subset=200",
        f"data.root={mnist_root}",
        "data.download=false",
    ]
    out, clean = tmp_path / "out", tmp_path / "clean"
    cmd = [sys.executable, "-m", "capsbench.cli", *args]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # each output dir keeps its own store
    proc = subprocess.Popen([*cmd, f"output_dir={out}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 600
    while not list((out / "accuracy" / "units").glob("*.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-3000:]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rerun = subprocess.run([*cmd, f"output_dir={out}"], capture_output=True, text=True, timeout=900, env=env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "2 unit(s): 1 finished by an earlier run of this command, 1 to run" in rerun.stderr
    uninterrupted = subprocess.run([*cmd, f"output_dir={clean}"], capture_output=True, text=True, timeout=900, env=env)
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert (out / "accuracy" / "table.md").read_text() == (clean / "accuracy" / "table.md").read_text()
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    parents = [
        r
        for r in client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    assert sorted(r.info.status for r in parents) == ["FINISHED", "KILLED"]


def test_unit_keys_stay_fixed_while_files_are_edited_under_a_running_driver(tmp_path, monkeypatch):
    """A run plans its units, files change on disk (a git checkout, an editor), and the same units must still be
    found when the tables are written: the code hash is the code the process imported."""
    from capsbench.util import hashing

    (unit,) = plan(smoke(tmp_path, "models=[cnn_9x9]"))
    before = unit.key
    monkeypatch.setattr(hashing, "_parsed", lambda path: ("edited", None))
    assert unit.key == before
