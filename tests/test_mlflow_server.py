"""The MLflow UI view of a capsbench run: `mlflow server` on a temporary SQLite store, checked through its REST API."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

READY_TIMEOUT_S = 180  # a loaded 2-core CI machine took 92 s to start it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(base, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
    return raw if path.startswith("/get-artifact") else json.loads(raw)


@pytest.fixture
def server(tracked_store, tmp_path):
    uri, _, _ = tracked_store
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--default-artifact-root", (tmp_path / "artifacts").as_uri()],
        stdout=open(tmp_path / "server.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"mlflow server exited with {proc.returncode}: {(tmp_path / 'server.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server not ready after {READY_TIMEOUT_S} s: "
                    f"{(tmp_path / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group: it and its workers only
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.slow
def test_ui_shows_parent_and_nested_runs_params_metrics_artifacts(server):
    exp = get(server, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=capsbench")["experiment"]
    runs = get(server, "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 100})[
        "runs"
    ]

    def tags(run):
        return {t["key"]: t["value"] for t in run["data"].get("tags", [])}

    parents = [r for r in runs if "mlflow.parentRunId" not in tags(r)]
    assert len(parents) == 2 and all(p["info"]["status"] == "FINISHED" for p in parents)
    for parent in parents:
        pid = parent["info"]["run_id"]
        ptags = tags(parent)
        assert ptags["suite"] == "accuracy" and ptags["budget"] == "smoke" and ptags["version.capsbench"]
        params = {p["key"]: p["value"] for p in parent["data"]["params"]}
        assert params["train.epochs"] == "1" and params["models"] == "['capsnet', 'cnn_sabour']"
        children = [r for r in runs if tags(r).get("mlflow.parentRunId") == pid]
        assert len(children) == 4  # 2 models x 2 seeds
        for child in children:
            metrics = {m["key"]: m["value"] for m in child["data"]["metrics"]}
            assert 0.0 <= metrics["test_accuracy"] <= 100.0
            assert metrics["test_error"] == pytest.approx(100.0 - metrics["test_accuracy"])
            assert {
                "model",
                "seed",
                "checkpoint.key",
                "model_args.routing_iterations" if "capsnet" in child["info"]["run_name"] else "model_args.channels",
            } <= {p["key"] for p in child["data"]["params"]}
        files = {f["path"] for f in get(server, f"/api/2.0/mlflow/artifacts/list?run_id={pid}").get("files", [])}
        assert {"records.csv", "table.md", "table.tex", "table-accuracy.csv", "config.yaml"} <= files
        table = get(server, f"/get-artifact?path=table.md&run_uuid={pid}").decode()
        assert "| capsnet" in table and "| cnn_sabour" in table  # an undertrained model is marked with a dagger
