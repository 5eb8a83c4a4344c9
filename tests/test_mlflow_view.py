"""MLflow a reader can use: parent runs named by what ran (suite, budget, models, a unique stamp), unit runs carrying
their headline numbers as a few named metrics beside the full set, and a browse hint that lands on the experiment's
runs table; the slow test follows the hint in a real headless browser (Chromium) on a store made by a smoke run."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from composing import compose
from conftest import make_splits
from mlflow.tracking import MlflowClient

from capsbench.util.uris import browse_hint, runs_url

READY_TIMEOUT_S = 300  # a loaded 2-core machine took minutes to start the UI's worker
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def runs(uri):
    client = MlflowClient(uri)
    (exp,) = client.search_experiments(filter_string="name = 'capsbench'")
    return exp.experiment_id, client.search_runs([exp.experiment_id], max_results=200)


def test_parents_say_what_ran_and_units_carry_their_headline_numbers(tracked_store):
    uri, _, _ = tracked_store
    _, found = runs(uri)
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    names = [p.info.run_name for p in parents]
    assert len(set(names)) == len(names) == 2, names  # never two "accuracy-smoke"
    assert all(re.fullmatch(r"accuracy-smoke-capsnet,cnn_sabour-\d{8}-\d{6}(-\d+)?", n) for n in names), names
    units = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    for unit in units:
        assert "| headline/test_accuracy |" in unit.data.tags["mlflow.note.content"]  # the top of the run's page
        metrics = unit.data.metrics
        assert metrics["headline/test_accuracy"] == metrics["test_accuracy"]  # beside the full set
        assert {k for k in metrics if k.startswith("headline/")} == {"headline/test_accuracy", "headline/test_error"}


def test_the_browse_hint_names_the_runs_table():
    assert runs_url("7") == "http://127.0.0.1:5000/#/experiments/7/runs"
    assert browse_hint("sqlite:////a b/m.db", "7") == (
        "uv run mlflow ui --backend-store-uri 'sqlite:////a b/m.db', then open http://127.0.0.1:5000/#/experiments/7/runs")
    assert browse_hint("http://mlflow.example.org:8080", "3") == "http://mlflow.example.org:8080/#/experiments/3/runs"


def _smoke_robustness(tmp_path, monkeypatch):
    """A smoke robustness run of one small CNN on synthetic images, tracked: (tracking uri, parent run id)."""
    from capsbench.run import driver, execute

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits(n_train=256, n_test=64))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose(["suite=robustness", "budget=smoke", f"output_dir={tmp_path}", f"tracking.uri={uri}", "device=cpu",
                   "threads=1", "models=[cnn_9x9]", "train.epochs=1", "params.attacks=[fgsm,pgd]",
                   "params.attack_args.pgd.steps=2", "params.examples=2"])
    return uri, driver.run_suite(cfg).parent_run_id


def _browser():
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        if os.environ.get("CI") == "true":
            pytest.fail("CI must check the MLflow UI in a browser: apt-get install chromium chromium-driver")
        pytest.skip("no Chromium: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1600,1000",
                f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # the system's driver: no download


def _serve(uri, port, log):
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "mlflow ui exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"mlflow ui not ready after {READY_TIMEOUT_S} s")


def _text_within(driver, pattern, seconds=120):
    """The page's text once it matches `pattern` (the UI renders after its scripts load)."""
    deadline = time.monotonic() + seconds
    while True:
        text = driver.find_element("tag name", "body").text
        if re.search(pattern, text) or time.monotonic() > deadline:
            return text
        time.sleep(1)


@pytest.mark.slow
def test_the_browse_hint_lands_on_the_runs_table_and_a_unit_shows_its_worst_case(tmp_path, monkeypatch):
    from test_mlflow_server import free_port

    uri, parent = _smoke_robustness(tmp_path, monkeypatch)
    experiment, found = runs(uri)
    (unit,) = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent]
    port = free_port()
    address = runs_url(experiment, f"http://127.0.0.1:{port}")
    with open(tmp_path / "ui.log", "wb") as log:
        proc = _serve(uri, port, log)
        driver = _browser()
        try:
            driver.get(address)
            name = next(r.info.run_name for r in found if r.info.run_id == parent)
            text = _text_within(driver, re.escape(name))
            driver.save_screenshot(str(tmp_path / "runs-table.png"))
            assert name in text, text[:2000]  # the runs table is the landing view, with the parent run in it
            # the address and the table are what count: MLflow titles the tab "Training runs" or "Runs" by the kind it
            # infers for the experiment, and a loaded machine caught the page before either title showed
            assert f"/#/experiments/{experiment}/runs?" in driver.current_url
            driver.get(f"http://127.0.0.1:{port}/#/experiments/{experiment}/runs/{unit.info.run_id}")
            worst = "headline/robust_accuracy.worst_case.eps_0.1"
            text = _text_within(driver, re.escape(worst))
            driver.save_screenshot(str(tmp_path / "unit-run.png"))
            assert worst in text, text[:3000]  # as the page opens: nothing typed in the metrics' search box
            metrics = text[text.index("Metrics ("):]
            assert metrics.index(worst) < metrics.index("robust_accuracy.fgsm")  # the headline first, then the set
        finally:
            driver.quit()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
