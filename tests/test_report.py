"""Tables: aggregation over seeds on hand-made records, bold only for a significant best by metric direction, formats."""

import math

import numpy as np
import pytest

from capsbench.report import aggregate, comparison_table, records_frame, to_csv, to_latex, to_markdown, write_outputs
from capsbench.suites.accuracy import AccuracySuite


def records():
    rows = []
    for model, accs in {"a": [97.6, 98.0, 98.4], "b": [99.3, 99.5, 99.7]}.items():
        for seed, acc in enumerate(accs):
            rows.append({"suite": "accuracy", "model": model, "dataset": "mnist", "seed": seed, "metric": "test_accuracy", "value": acc})
            rows.append({"suite": "accuracy", "model": model, "dataset": "mnist", "seed": seed, "metric": "test_error", "value": 100 - acc})
    return rows


def test_aggregate_mean_std_n():
    agg = aggregate(records_frame(records(), AccuracySuite), AccuracySuite).set_index(["model", "metric"])
    assert agg.loc[("a", "test_accuracy"), "mean"] == pytest.approx(98.0)
    assert agg.loc[("a", "test_accuracy"), "std"] == pytest.approx(0.4)  # sample std (ddof=1)
    assert agg.loc[("a", "test_accuracy"), "n"] == 3
    assert agg.loc[("b", "test_error"), "std"] == pytest.approx(0.2)


def test_best_respects_direction_and_significance():
    table = comparison_table(records_frame(records(), AccuracySuite), AccuracySuite)
    assert table.best["test_accuracy"] == {"b"}  # 99.5 vs 98.0 over three seeds: Welch p < 0.05, higher is better
    assert table.best["test_error"] == {"b"}  # 0.5 < 2.0: lower is better
    rows = records()
    for r in rows:  # make "a" as good as "b" on accuracy only: inside the noise, nothing is bold there
        if r["model"] == "a" and r["metric"] == "test_accuracy":
            r["value"] += 1.6
    table = comparison_table(records_frame(rows, AccuracySuite), AccuracySuite)
    assert table.best["test_accuracy"] == set() and table.best["test_error"] == {"b"}


def test_ties_and_single_seeds_without_outcomes_are_never_bold():
    rows = [{"suite": "accuracy", "model": m, "dataset": "mnist", "seed": 0, "metric": "test_accuracy", "value": v}
            for m, v in (("a", 99.5), ("b", 98.0), ("c", 99.5))]
    table = comparison_table(records_frame(rows, AccuracySuite), AccuracySuite)
    assert table.best["test_accuracy"] == set()
    assert "**" not in to_markdown(table)


def test_paired_outcomes_decide_best_on_one_seed():
    from capsbench.stats import accuracy_fields

    def rec(model, right):
        ok = np.arange(1000) < right
        return {"suite": "accuracy", "model": model, "dataset": "mnist", "seed": 0, "metric": "test_accuracy",
                **accuracy_fields(ok)}

    far = comparison_table(records_frame([rec("a", 990), rec("b", 950)], AccuracySuite), AccuracySuite)
    near = comparison_table(records_frame([rec("a", 990), rec("b", 985)], AccuracySuite), AccuracySuite)
    assert far.best["test_accuracy"] == {"a"} and near.best["test_accuracy"] == set()
    md = to_markdown(far)
    assert "| a | **99.00 [98.2, 99.5]** |" in md and "over 1000 test images" in md


def test_formats_mark_best_and_show_spread():
    table = comparison_table(records_frame(records(), AccuracySuite), AccuracySuite)
    md = to_markdown(table)
    assert "| a | 98.00 ± 0.40 | 2.00 ± 0.40 |" in md
    assert "| b | **99.50 ± 0.20** | **0.50 ± 0.20** |" in md
    tex = to_latex(table)
    assert r"\toprule" in tex and r"\textbf{99.50$\pm$0.20}" in tex and r"test\_accuracy [\%]" in tex
    csv = to_csv(table).splitlines()
    assert csv[0] == "model,test_accuracy mean,test_accuracy std,test_accuracy n,test_error mean,test_error std,test_error n"
    assert csv[1].startswith("a,98.0,0.4") and csv[1].split(",")[3] == "3"


def test_single_seed_has_no_spread(tmp_path):
    one = [r for r in records() if r["seed"] == 0]
    paths = write_outputs(tmp_path, one, AccuracySuite)
    md = paths["table.md"].read_text()
    assert "±" not in md.split("\n\n")[0]
    assert set(paths) == {"records.csv", "table.md", "table.tex", "table.csv"}
    assert not list(tmp_path.glob(".*.tmp"))
    assert math.isclose(float(paths["records.csv"].read_text().splitlines()[1].split(",")[-1]), 97.6)


def test_sweep_plots_are_written_as_png_and_pdf(tmp_path):
    from capsbench.plots import SweepPlot

    class SweepSuite(AccuracySuite):
        sweep_columns = ("eps",)
        plots = (SweepPlot("acc_vs_eps", "test_accuracy", "eps"),)

    rows = [
        {"suite": "s", "model": m, "dataset": "mnist", "seed": s, "metric": "test_accuracy", "eps": e, "value": 90 - 100 * e + s}
        for m in ("a", "b") for s in (0, 1) for e in (0.0, 0.1, 0.2)
    ]
    paths = write_outputs(tmp_path, rows, SweepSuite)
    assert paths["acc_vs_eps.png"].read_bytes()[:4] == b"\x89PNG"
    assert paths["acc_vs_eps.pdf"].read_bytes()[:4] == b"%PDF"
    assert "test_accuracy (eps=0.1)" in paths["table.md"].read_text()


@pytest.mark.parametrize("mean, std, unit, expected", [
    (98.95123, 0.04312, "%", ("98.951", "0.043")),  # std to two significant digits, mean to the same place
    (98.0, 1.0, "%", ("98.0", "1.0")),
    (35.2, 27.4, "%", ("35", "27")),
    (12.3456, None, "ms", ("12.35", None)),
    (99.123, None, "%", ("99.12", None)),
    (8215568.0, None, "count", ("8,215,568", None)),
    (98.5, 0.0, "%", ("98.50", "0.00")),
])
def test_format_value_significant_digits(mean, std, unit, expected):
    from capsbench.report import format_value

    assert format_value(mean, std, unit) == expected


def test_published_numbers_sit_beside_measured_ones_with_footnotes():
    reported = [
        {"model": "a", "dataset": "mnist", "metric": "test_error", "value": 0.25, "std": 0.005, "footnote": "Paper A, Table 1: r=3"},
        {"model": "b", "dataset": "mnist", "metric": "test_error", "value": 0.39, "std": None, "footnote": "Paper A, Table 1: base"},
        {"model": "zzz", "dataset": "mnist", "metric": "test_error", "value": 1.0, "std": None, "footnote": "unmeasured model"},
    ]
    table = comparison_table(records_frame(records(), AccuracySuite), AccuracySuite, reported)
    assert table.columns == ["test_accuracy", "test_error"] and table.footnotes == ["Paper A, Table 1: r=3", "Paper A, Table 1: base"]
    md = to_markdown(table)
    assert "| model | test_accuracy [%] | test_error [%] | test_error reported [%] |" in md
    assert "| a | 98.00 ± 0.40 | 2.00 ± 0.40 | 0.25 ± 0.005 [1] |" in md
    assert "| b | **99.50 ± 0.20** | **0.50 ± 0.20** | 0.39 [2] |" in md  # bold compares measured values only
    assert "[1] Paper A, Table 1: r=3" in md and "unmeasured" not in md
    tex = to_latex(table)
    assert r"0.25$\pm$0.005$^{1}$" in tex and r"\noindent$^{2}$ Paper A, Table 1: base\par" in tex
    assert "test_error reported std" in to_csv(table).splitlines()[0]


def test_cells_with_fewer_seeds_are_marked():
    rows = [r for r in records() if not (r["model"] == "b" and r["seed"] == 2)]
    md = to_markdown(comparison_table(records_frame(rows, AccuracySuite), AccuracySuite))
    assert "| b | **99.40 ± 0.14 (n=2)** |" in md and "n = 2/3 seed(s)" in md
