"""Two invocations started at once on a new output directory both create their MLflow runs: the SQLite store is
created and migrated once, under a file lock (without it one of them dies in the schema migration)."""

import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

START_AT_ONCE = """
import sys, time
from pathlib import Path
from capsbench.tracking import Tracker

out, me, gate = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
tracker = Tracker(uri=f"sqlite:///{out / 'mlflow.db'}", experiment="capsbench", artifact_root=out / "mlartifacts")
(gate / f"ready-{me}").touch()
while not (gate / "go").exists():
    time.sleep(0.002)
run_id = tracker.start_parent(f"run-{me}", {"who": me}, {"suite": "accuracy"}, "seeds: [0]\\n")
tracker.finish_parent(run_id, {}, [])
"""


def test_concurrent_first_start_on_a_fresh_directory(tmp_path):
    out, gate = tmp_path / "out", tmp_path / "gate"
    gate.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", START_AT_ONCE, str(out), str(i), str(gate)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    deadline = time.monotonic() + 240
    while not all((gate / f"ready-{i}").exists() for i in (0, 1)):  # both have imported everything
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    (gate / "go").touch()
    results = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["run-0", "run-1"]
    assert {r.info.status for r in runs} == {"FINISHED"}
