"""Tables: aggregation over seeds on hand-made records, best-in-bold by metric direction, formats."""

import math

import pytest

from capsbench.report import aggregate, comparison_table, records_frame, to_csv, to_latex, to_markdown, write_outputs
from capsbench.suites.accuracy import AccuracySuite


def records():
    rows = []
    for model, accs in {"a": [99.0, 98.0, 97.0], "b": [98.5, 98.5, 98.5]}.items():
        for seed, acc in enumerate(accs):
            rows.append({"suite": "accuracy", "model": model, "dataset": "mnist", "seed": seed, "metric": "test_accuracy", "value": acc})
            rows.append({"suite": "accuracy", "model": model, "dataset": "mnist", "seed": seed, "metric": "test_error", "value": 100 - acc})
    return rows


def test_aggregate_mean_std_n():
    agg = aggregate(records_frame(records(), AccuracySuite), AccuracySuite).set_index(["model", "metric"])
    assert agg.loc[("a", "test_accuracy"), "mean"] == pytest.approx(98.0)
    assert agg.loc[("a", "test_accuracy"), "std"] == pytest.approx(1.0)  # sample std (ddof=1)
    assert agg.loc[("a", "test_accuracy"), "n"] == 3
    assert agg.loc[("b", "test_error"), "std"] == pytest.approx(0.0)


def test_best_respects_direction():
    table = comparison_table(aggregate(records_frame(records(), AccuracySuite), AccuracySuite), AccuracySuite)
    assert table.best["test_accuracy"] == "b"  # 98.5 > 98.0: higher is better
    assert table.best["test_error"] == "b"  # 1.5 < 2.0: lower is better
    # make "a" better at accuracy only: its error column must then still be judged by lower-is-better
    rows = records()
    for r in rows:
        if r["model"] == "a" and r["metric"] == "test_accuracy":
            r["value"] += 1.0
    table = comparison_table(aggregate(records_frame(rows, AccuracySuite), AccuracySuite), AccuracySuite)
    assert table.best["test_accuracy"] == "a" and table.best["test_error"] == "b"


def test_formats_mark_best_and_show_spread():
    table = comparison_table(aggregate(records_frame(records(), AccuracySuite), AccuracySuite), AccuracySuite)
    md = to_markdown(table)
    assert "| a | 98.00 ± 1.00 | 2.00 ± 1.00 |" in md
    assert "| b | **98.50 ± 0.00** | **1.50 ± 0.00** |" in md
    tex = to_latex(table)
    assert r"\toprule" in tex and r"\textbf{98.50$\pm$0.00}" in tex and r"test\_accuracy [\%]" in tex
    csv = to_csv(table).splitlines()
    assert csv[0] == "model,test_accuracy mean,test_accuracy std,test_accuracy n,test_error mean,test_error std,test_error n"
    assert csv[1].startswith("a,98.0,1.0,3")


def test_single_seed_has_no_spread(tmp_path):
    one = [r for r in records() if r["seed"] == 0]
    paths = write_outputs(tmp_path, one, AccuracySuite)
    md = paths["table.md"].read_text()
    assert "±" not in md.split("\n\n")[0]
    assert set(paths) == {"records.csv", "table.md", "table.tex", "table.csv"}
    assert not list(tmp_path.glob(".*.tmp"))
    assert math.isclose(float(paths["records.csv"].read_text().splitlines()[1].split(",")[-1]), 99.0)


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
