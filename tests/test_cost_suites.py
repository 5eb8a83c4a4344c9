"""The efficiency and routing suites through the driver on synthetic data: fresh models without training,
variants expanded into record columns, parameters validated before anything runs."""

import re

import pandas as pd
import pytest
from composing import compose

from capsbench.errors import CapsbenchError
from capsbench.run import driver, execute
from capsbench.suites import SUITES


@pytest.fixture
def run(tmp_path, monkeypatch, tiny_splits):
    """run(*overrides): the smoke budget on synthetic splits, everything under tmp_path, MLflow off."""
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: tiny_splits)

    def go(*overrides):
        cfg = compose([*overrides, "budget=smoke", f"output_dir={tmp_path}", "tracking.enabled=false", "device=cpu"])
        return driver.run_suite(cfg)

    return go


def test_efficiency_builds_fresh_models_and_reports_every_metric(tmp_path, run):
    result = run("suite=efficiency", "models=[capsnet,cnn_9x9]", "params.repeats=1",
                 "params.warmup=0", "params.routing_max_iterations=2")
    frame = pd.DataFrame(result.records)
    assert not (tmp_path / "checkpoints").exists()  # nothing trained, nothing cached
    caps = frame[frame.model == "capsnet"]
    assert set(caps.metric) >= {"params", "macs", "flops", "flopcounter_macs", "latency", "throughput",
                                "routing_latency", "routing_iteration_latency"}
    assert sorted(caps[caps.metric == "routing_latency"].r.dropna().unique()) == [1, 2]
    macs = caps[(caps.metric == "macs") & (caps.part == "total")].value.item()
    assert caps[caps.metric == "flops"].value.item() == pytest.approx(2 * macs)
    assert caps[caps.metric == "flopcounter_macs"].value.item() == pytest.approx(macs)
    cnn = frame[frame.model == "cnn_9x9"]
    assert "routing_iteration_latency" not in set(cnn.metric)
    assert set(cnn[cnn.metric == "params"].part) == {"encoder", "total"}
    assert "slope" in caps[caps.metric == "routing_iteration_latency"].method.iloc[0]
    # every timing says the load it was taken under (a latency beside other work reads slower), under the table
    loads = set(frame[frame.metric == "latency"].host_load)
    assert len(loads) >= 1 and all(re.fullmatch(r"\d+\.\d on \d+ CPUs", load) for load in loads), loads
    table = (tmp_path / "efficiency" / "table.md").read_text()
    assert re.search(r"^- host_load: \d+\.\d on \d+ CPUs", table, re.M), table


def test_routing_suite_trains_one_variant_per_r(tmp_path, run):
    result = run("suite=routing", "params.iterations=[1,2]", "train.epochs=1",
                 "params.repeats=1", "params.warmup=0")
    frame = pd.DataFrame(result.records)
    assert sorted(frame[frame.metric == "test_accuracy"].r) == [1, 2]
    assert (tmp_path / "routing" / "routing_ablation.png").exists()
    assert "| r | accuracy (%)" in result.markdown
    timing = r"^- device: cpu .*\n- dtype: float32\n- host_load: \d+\.\d on \d+ CPUs$"
    assert re.search(timing, result.markdown, re.M), result.markdown  # how the latencies were taken, as in efficiency


def test_routing_variants_leave_models_without_routing_alone():
    cfg = compose(["suite=routing", "budget=smoke", "device=cpu"])
    suite = SUITES.get("routing")()
    assert [v.model_args for v in suite.variants(cfg, "capsnet")] == [{"routing_iterations": r} for r in (1, 2, 3)]
    assert [v.columns for v in suite.variants(cfg, "cnn_9x9")] == [{}]


@pytest.mark.parametrize("suite", ["efficiency", "routing"])
def test_fp16_is_refused_before_anything_runs(run, suite):
    with pytest.raises(CapsbenchError, match="fp16"):
        run(f"suite={suite}", "params.precision=fp16")


def test_host_load_reads_the_load_average_against_the_usable_cpus(monkeypatch):
    from capsbench.cost import timing

    monkeypatch.setattr(timing.os, "getloadavg", lambda: (2.14, 1.0, 0.5))
    monkeypatch.setattr(timing.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)  # not the machine's count
    assert timing.host_load() == "2.1 on 3 CPUs"

    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr(timing.os, "getloadavg", unavailable)
    assert timing.host_load() == "unknown"
