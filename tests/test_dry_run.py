"""--dry-run prices a plan for its device before anything runs, and the one cost model behind it: a unit's declared
work over the device's measured rates, with what this machine measured over the shipped table, its basis said."""

from __future__ import annotations

import json
import math

import pytest
from composing import compose

from capsbench.run.cost_model import (
    Work,
    measuring_where,
    observe,
    price,
    rates,
    reference_macs,
    training_work,
    unit_macs,
)
from capsbench.run.plan import plan
from capsbench.run.units import UnitResult


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_a_dry_run_of_a_cuda_plan_on_a_machine_without_one_prints_gpu_minutes_and_writes_nothing(
        tmp_path, cli_probe, mnist_root):
    out = tmp_path / "out"
    probe = cli_probe(["run", "suite=claims", "budget=paper", "device=cuda", f"data.root={mnist_root}",
                       "data.download=false", f"output_dir={out}", "claims=[circulated-pgd-capsnet]", "--dry-run",
                       "--gpu", "H200", "--format", "json"], cwd=tmp_path)
    assert probe.code == 0, probe.stderr
    described = json.loads(probe.stdout)
    assert described["device"] == "NVIDIA H200" and 1 < described["minutes"] < 120
    assert described["sections"][0]["to_train"] == 6 and "circulated-pgd-capsnet" in " ".join(described["notes"])
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_gpu_without_dry_run_is_refused(tmp_path, cli_probe):
    probe = cli_probe(["run", "suite=accuracy", "--gpu", "H100"], cwd=tmp_path)
    assert probe.code == 2 and "--gpu names the GPU a --dry-run prices" in probe.stderr


def test_gpu_for_a_run_on_the_cpu_is_refused_not_ignored(tmp_path, mnist_root):
    """--gpu H200 on a plan whose device is the CPU priced the CPU and said nothing of the GPU it was asked for."""
    from typer.testing import CliRunner

    from capsbench.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "suite=accuracy", "device=cpu", f"data.root={mnist_root}",
                                      "data.download=false", f"output_dir={out}", "--dry-run", "--gpu", "H200"])
    assert result.exit_code == 2 and result.output.strip() == ("error: --gpu H200 prices a CUDA run, but this run's "
                                                               "device is cpu: add device=cuda"), result.output
    assert not out.exists()


def test_price_is_work_over_rate_and_says_how_it_derived_what_was_not_measured(tmp_path):
    cfg = compose(["suite=robustness", f"output_dir={tmp_path}", "device=cpu"])
    units = plan(cfg)
    work = {u.key: Work(train=3670.0 * 60 if u.model == "capsnet" else 0.0, measure=13500.0 * 60) for u in units}
    table = {"cpu2": {"label": "2 cores", "scale": 2, "train": {"quick": {"capsnet": 3670}},
                      "measure": {"robustness/quick": {"capsnet": 13500, "cnn_sabour": 27000}}}}
    estimate = price(units, work, "cpu2", table)
    nine, near = next(u for u in units if u.model == "cnn_9x9"), None
    macs = {m: reference_macs(m, "quick", nine) for m in ("capsnet", "cnn_sabour")}
    near = min(macs, key=lambda m: abs(math.log(macs[m] / unit_macs(nine))))
    rate = {"capsnet": 13500, "cnn_sabour": 27000}[near] * macs[near] / unit_macs(nine)
    assert estimate.minutes == pytest.approx(1 + 1 + 0.5 + 13500 / rate)  # capsnet 1 + 1 min, cnn_sabour 0.5
    assert f"cnn_9x9 (measure, robustness/quick) scaled by MACs from {near}" in estimate.why
    assert estimate.device == "2 cores" and estimate.basis == "priced for 2 cores, idle"
    assert price(units, work, "cpu8", table).why.startswith("cpu8 is not in suites/devices/rates.yaml: priced as cpu2")
    assert price(units, work, "cpu2", {"cpu2": {"label": "x"}}).minutes is None


def test_a_gpu_nobody_measured_is_priced_from_one_that_was_by_published_peak(tmp_path):
    cfg = compose(["suite=robustness", f"output_dir={tmp_path}", "device=cpu", "models=[capsnet]"])
    units = plan(cfg)
    work = {u.key: Work(train=0.0, measure=1e6) for u in units}
    table = {"H200": {"label": "H200", "scale": 60, "measure": {"robustness/quick": {"capsnet": 1e6}}},
             "A100": {"label": "A100", "scale": 20}}
    estimate = price(units, work, "A100", table)
    assert estimate.minutes == pytest.approx(3 / 60) and "scaled from H200's measured rate by peak fp32" in estimate.why
    assert estimate.basis == "priced from the measured rates of H200"


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_a_dry_run_of_the_paper_claims_prices_the_default_gpu_on_a_machine_without_one(tmp_path, cli_probe,
                                                                                       mnist_root):
    probe = cli_probe(["run", "suite=claims", "budget=paper", "device=cuda", f"data.root={mnist_root}",
                       "data.download=false", f"output_dir={tmp_path / 'out'}", "claims=[marchisio2023-worst-case]",
                       "--dry-run", "--format", "json"], cwd=tmp_path)
    assert probe.code == 0, probe.stderr
    described = json.loads(probe.stdout)
    assert described["device"] == "NVIDIA H100" and described["minutes"] > 0
    assert "scaled from NVIDIA H200's measured rate" in described["why"]


def test_a_finished_unit_adds_its_rates_to_this_machines_table(tmp_path):
    cfg = compose(["suite=robustness", f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}", "device=cpu"])
    unit = plan(cfg)[0]
    (tmp_path / "cache").mkdir()
    done = UnitResult(key=unit.key, spec=unit, status="done", seconds=100.0, train_seconds=40.0)
    observe(done, Work(train=training_work(unit), measure=6_000_000.0), "cpu2", str(tmp_path / "cache"))
    table = rates(str(tmp_path / "cache"))
    assert table["cpu2"]["train"]["quick"]["capsnet"] == round(training_work(unit) / 40)
    assert table["cpu2"]["measure"]["robustness/quick"]["capsnet"] == 100_000
    shipped = rates(None)["cpu2"]["train"]["quick"]["cnn_sabour"]
    assert table["cpu2"]["train"]["quick"]["cnn_sabour"] == shipped  # the shipped rates of what it did not measure
    assert "H200" in table
    units = plan(cfg)[:2]  # capsnet, whose rates are now this machine's, and cnn_sabour, priced by the shipped ones
    work = {u.key: Work(1.0, 1.0) for u in units}
    assert price(units[:1], work, "cpu2", table).basis == "priced by this machine's earlier runs"
    assert price(units, work, "cpu2", table).basis == ("priced for 2 x86-64 CPU cores, idle, and by this machine's "
                                                       "earlier runs")


def test_an_affine_units_training_rate_does_not_price_another_suites_training(tmp_path):
    """The affine suite trains narrower models on 40x40 canvases under the same budget and model names: its rate is
    kept per image of the budget's model on the dataset's own images, so it prices its own training back and the
    robustness suite's CapsNet by their MACs, not as if their images cost the same."""
    cache = tmp_path / "cache"
    cache.mkdir()
    common = [f"output_dir={tmp_path}", f"cache_dir={cache}", "device=cpu", "models=[capsnet]"]
    affine, plain = plan(compose(["suite=affine", *common]))[0], plan(compose(["suite=robustness", *common]))[0]
    ratio = unit_macs(affine) / unit_macs(plain)
    assert unit_macs(plain) == reference_macs("capsnet", "quick", plain) and ratio != pytest.approx(1.0, rel=0.05)
    done = UnitResult(key=affine.key, spec=affine, status="done", seconds=100.0, train_seconds=50.0)
    passes = training_work(affine)
    observe(done, Work(train=passes, measure=1.0), "cpu2", str(cache))
    table = rates(str(cache))
    assert table["cpu2"]["train"]["quick"]["capsnet"] == pytest.approx(passes / 50 * ratio, rel=1e-3)
    again = price([affine], {affine.key: Work(passes, 0.0)}, "cpu2", table)
    assert again.minutes * 60 == pytest.approx(50.0, rel=1e-3)  # its own training priced back at its own speed
    robust = price([plain], {plain.key: Work(passes, 0.0)}, "cpu2", table)
    assert robust.minutes * 60 == pytest.approx(50.0 / ratio, rel=1e-3)  # the other suite's by their MACs


def test_the_units_bar_counts_priced_seconds_and_credits_measuring_in_them(tmp_path):
    from capsbench.run.cost_model import Credits, priced_work
    from capsbench.run.units import UnitEvent

    cfg = compose(["suite=robustness", f"output_dir={tmp_path}", "device=cpu"])
    units = plan(cfg)
    work = {u.key: Work(train=0.0, measure=13500.0 * 60) for u in units}
    table = {"cpu2": {"measure": {"robustness/quick": {"capsnet": 13500, "cnn_sabour": 27000}}}}
    seconds = priced_work(units, work, "cpu2", table)
    assert [seconds[u.key].measure for u in units[:2]] == [60.0, 30.0]  # cnn_9x9's derived by MACs (test above)
    assert sum(w.measure for w in seconds.values()) / 60 == pytest.approx(price(units, work, "cpu2", table).minutes)
    credits = Credits(seconds, units, declared=work)
    half = UnitEvent(units[1].key, "measured", {"passes": 13500.0 * 30})
    assert credits.event(half) == 15.0  # half of cnn_sabour's declared passes: half its 30 priced seconds


def test_a_rates_file_with_parts_of_the_wrong_kind_loses_only_those_parts(tmp_path, caplog):
    """rates.json is valid JSON whose parts are not rates (a device that is a string, rates that are words, NaN, a
    negative or a boolean): those parts are dropped with a warning naming the file, the well-formed rate is this
    machine's, a plan is priced, and the next finished unit writes the file afresh."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "rates.json").write_text(json.dumps({
        "cpu2": {"train": {"quick": {"capsnet": 1234, "cnn_sabour": "fast", "cnn_9x9": -3.0, "baseline_mlp": True}},
                 "measure": ["robustness/quick"], "other": {}},
        "cpu4": "fast", "H200": {"train": {"quick": {"capsnet": float("nan")}}}}))
    table = rates(str(cache))
    assert "rates.json: kept only its well-formed rates" in caplog.text and str(cache) in caplog.text
    assert table["cpu2"]["train"]["quick"]["capsnet"] == 1234 and table["cpu2"]["observed"] == ["train/quick/capsnet"]
    shipped = rates(None)
    assert table["cpu2"]["train"]["quick"]["cnn_sabour"] == shipped["cpu2"]["train"]["quick"]["cnn_sabour"]
    assert table["H200"]["train"]["quick"]["capsnet"] == shipped["H200"]["train"]["quick"]["capsnet"]
    cfg = compose(["suite=robustness", f"output_dir={tmp_path}", f"cache_dir={cache}", "device=cpu"])
    units = plan(cfg)[:2]
    assert price(units, {u.key: Work(1.0, 1.0) for u in units}, "cpu2", table).minutes > 0
    done = UnitResult(key=units[1].key, spec=units[1], status="done", seconds=100.0, train_seconds=40.0)
    observe(done, Work(train=training_work(units[1]), measure=6_000_000.0), "cpu2", str(cache))
    assert json.loads((cache / "rates.json").read_text()) == {"cpu2": {
        "train": {"quick": {"capsnet": 1234, "cnn_sabour": round(training_work(units[1]) / 40)}},
        "measure": {"robustness/quick": {"cnn_sabour": 100_000}}}}


def test_minimum_norm_attacks_give_a_unit_a_measuring_speed_of_its_own(tmp_path):
    """Early exit cuts the fixed-eps attacks' declared passes to a fraction while FMN and FAB run theirs in full, so
    a robustness_l2 unit with params.minimal learns and is priced at robustness_l2+minimal/<budget>: what it measured
    prices it back exactly, and leaves the price of a unit without minimum-norm attacks as it was."""
    cache = tmp_path / "cache"
    cache.mkdir()
    common = ["suite=robustness_l2", f"output_dir={tmp_path}", f"cache_dir={cache}", "device=cpu", "models=[capsnet]"]
    (plain,), (minimal,) = plan(compose(common)), plan(compose([*common, "params.minimal=[fmn]"]))
    assert (measuring_where(plain), measuring_where(minimal)) == ("robustness_l2/quick", "robustness_l2+minimal/quick")
    work = {u.key: Work(0.0, 1_000_000.0) for u in (plain, minimal)}
    before = price([plain], work, "cpu2", rates(str(cache))).minutes
    done = UnitResult(key=minimal.key, spec=minimal, status="done", seconds=500.0)
    observe(done, work[minimal.key], "cpu2", str(cache))
    table = rates(str(cache))
    assert table["cpu2"]["measure"]["robustness_l2+minimal/quick"] == {"capsnet": 2_000}
    assert price([minimal], work, "cpu2", table).minutes * 60 == pytest.approx(500.0)
    assert price([plain], work, "cpu2", table).minutes == before
