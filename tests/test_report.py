"""Tables from records by a layout: aggregation over seeds, bold only for a significant best by metric direction,
published numbers, undertrained rows, splitting, escaping and the files a suite writes."""

import numpy as np
import pandas as pd
import pytest

from capsbench.reporting import csv, latex, markdown
from capsbench.reporting.frame import records_frame
from capsbench.reporting.model import Header, Measured, Table, split_parts
from capsbench.reporting.outputs import write_suite
from capsbench.reporting.tables import build_tables
from capsbench.suites import SUITES
from capsbench.suites.accuracy import AccuracySuite
from capsbench.suites.layout import Layout, SweepColumns, TableSpec
from capsbench.util.stats import accuracy_fields


def records():
    rows = []
    for model, accs in {"a": [97.6, 98.0, 98.4], "b": [99.3, 99.5, 99.7]}.items():
        for seed, acc in enumerate(accs):
            rows.append(
                {
                    "suite": "accuracy",
                    "model": model,
                    "dataset": "mnist",
                    "seed": seed,
                    "metric": "test_accuracy",
                    "value": acc,
                }
            )
            rows.append(
                {
                    "suite": "accuracy",
                    "model": model,
                    "dataset": "mnist",
                    "seed": seed,
                    "metric": "test_error",
                    "value": 100 - acc,
                }
            )
    return rows


def table(rows, reported=None, suite=AccuracySuite, layout=None):
    [t] = build_tables(records_frame(rows, suite), suite, layout or suite.layout, reported)
    return t


def best(t):
    """header label -> the bold rows' model labels."""
    return {h.label: {t.rows[i][-1] for i, k in t.best if k == h.key} for h in t.headers if h.kind == "measured"}


def measured(t, model, label):
    """The Measured cell of `model`'s row under the header labelled `label`."""
    [key] = [h.key for h in t.headers if h.kind == "measured" and h.label == label]
    [row] = [i for i, r in enumerate(t.rows) if r[-1] == model]
    return t.cells[(row, key)]


def test_cells_hold_mean_sample_std_and_seeds():
    t = table(records())
    assert measured(t, "a", "accuracy").mean == pytest.approx(98.0)
    assert measured(t, "a", "accuracy").std == pytest.approx(0.4)  # sample std (ddof=1)
    assert measured(t, "a", "accuracy").seeds == 3
    assert measured(t, "b", "error").std == pytest.approx(0.2)


def test_best_respects_direction_and_significance():
    assert best(table(records())) == {"accuracy": {"b"}, "error": {"b"}}  # Welch p < 0.05; error: lower is better
    rows = records()
    for r in rows:  # make "a" as good as "b" on accuracy only: inside the noise, nothing is bold there
        if r["model"] == "a" and r["metric"] == "test_accuracy":
            r["value"] += 1.6
    assert best(table(rows)) == {"accuracy": set(), "error": {"b"}}


def test_ties_and_single_seeds_without_outcomes_are_never_bold():
    rows = [
        {"suite": "accuracy", "model": m, "dataset": "mnist", "seed": 0, "metric": "test_accuracy", "value": v}
        for m, v in (("a", 99.5), ("b", 98.0), ("c", 99.5))
    ]
    t = table(rows)
    assert (
        t.best == set()
        and "**" not in markdown.render_table(t).split("\n", 1)[1]
        and r"\textbf" not in latex.tabular(t)
    )
    assert "bold" in t.notes[-1]  # the rule is stated even when nothing qualifies


def acc_record(model, right, n=1000, seed=0, **extra):
    ok = np.arange(n) < right
    return {
        "suite": "accuracy",
        "model": model,
        "dataset": "mnist",
        "seed": seed,
        "metric": "test_accuracy",
        **accuracy_fields(ok),
        **extra,
    }


def test_one_seed_is_never_bold_however_far_apart():
    far = table([acc_record("a", 990), acc_record("b", 950)])
    assert best(far)["accuracy"] == set()
    md = markdown.render_table(far)
    assert "| a | 99.0 [98.2, 99.5] |" in md and "95 % Wilson interval over 1,000 test images" in md
    assert "nothing is bold: one seed compares these weights" in md
    tex = latex.tabular(far)
    assert r"99.0\\\scriptsize 98.2--99.5" in tex and r"\textbf" not in tex  # one decimal at n = 1,000
    assert r"accuracy\\(\%)\\n~=~1,000" in tex  # n in the header, on a line of its own that never breaks


def test_seeds_with_paired_outcomes_decide_best():
    far = table([acc_record("a", 990, seed=s) for s in (0, 1)] + [acc_record("b", 950, seed=s) for s in (0, 1)])
    near = table([acc_record("a", 990, seed=s) for s in (0, 1)] + [acc_record("b", 988, seed=s) for s in (0, 1)])
    assert best(far)["accuracy"] == {"a"} and best(near)["accuracy"] == set()


def test_undertrained_rows_are_marked_and_never_best():
    rows = [acc_record(m, right, seed=s, **extra) for s in (0, 1)
            for m, right, extra in (("a", 990, {"undertrained": True}), ("b", 950, {}), ("c", 900, {}))]
    t = table(rows)
    assert [r[0] for r in t.rows] == ["a†", "b", "c"] and best(t)["accuracy"] == {"b"}
    assert any(n.startswith("† undertrained") for n in t.notes)
    assert r"a\ensuremath{^{\dagger}}" in latex.tabular(t)


def test_formats_mark_best_and_show_spread():
    t = table(records())
    md = markdown.render_table(t)
    assert "| model | accuracy (%) | error (%) |" in md
    assert "| a | 98.00 ± 0.40 | 2.00 ± 0.40 |" in md and "| b | **99.50 ± 0.20** | **0.50 ± 0.20** |" in md
    tex = latex.render_table(t, "accuracy")
    assert r"\toprule" in tex and r"\textbf{99.50}\\\scriptsize \ensuremath{\pm}0.20" in tex
    assert r"\label{tab:accuracy-accuracy}" in tex and r"accuracy\\(\%)" in tex
    lines = csv.render_table(t).splitlines()
    assert lines[0].startswith("model,accuracy (%) mean,accuracy (%) std,accuracy (%) seeds,")
    assert lines[1].startswith("a,98.0,0.4") and ",True," in lines[2]


def test_cells_with_fewer_seeds_are_marked():
    rows = [r for r in records() if not (r["model"] == "b" and r["seed"] == 2)]
    md = markdown.render_table(table(rows))
    assert "| b | **99.40 ± 0.14 (n=2)** |" in md and "two or three seeds" in md


@pytest.mark.parametrize(
    "mean, std, unit, expected",
    [
        (98.95123, 0.04312, "%", ("98.951", "0.043")),  # std to two significant digits, mean to the same place
        (98.0, 1.0, "%", ("98.0", "1.0")),
        (35.2, 27.4, "%", ("35", "27")),
        (12.3456, None, "ms", ("12.35", None)),
        (99.123, None, "%", ("99.12", None)),
        (8215568.0, None, "count", ("8,215,568", None)),
        (2857.14, None, "img/s", ("2,857", None)),
        (98.5, 0.0, "%", ("98.50", "0.00")),
        (203.20256, 2.8e-14, "M MACs", ("203.2", "0.0")),  # an exact count's float rounding is no spread
    ],
)
def test_format_value_significant_digits(mean, std, unit, expected):
    from capsbench.reporting.formatting import format_value

    assert format_value(mean, std, unit) == expected


def test_published_numbers_sit_beside_measured_ones_with_footnotes():
    reported = [
        {
            "model": "a",
            "dataset": "mnist",
            "metric": "test_error",
            "value": 0.25,
            "std": 0.005,
            "footnote": "Paper A, Table 1: r=3",
        },
        {
            "model": "b",
            "dataset": "mnist",
            "metric": "test_error",
            "value": 0.39,
            "std": None,
            "footnote": "Paper A, Table 1: base",
        },
        {
            "model": "zzz",
            "dataset": "mnist",
            "metric": "test_error",
            "value": 1.0,
            "std": None,
            "footnote": "unmeasured model",
        },
        {
            "model": "a",
            "dataset": "mnist",
            "metric": "test_error",
            "eps": 0.1,
            "value": 9.0,
            "std": None,
            "footnote": "a sweep value the column does not fix",
        },
    ]
    t = table(records(), reported)
    assert [h.kind for h in t.headers] == ["measured", "measured", "published"]
    assert t.references == ["Paper A, Table 1: r=3", "Paper A, Table 1: base"]
    md = markdown.render_table(t)
    assert "| model | accuracy (%) | error (%) | error, published (%) |" in md
    assert "| a | 98.00 ± 0.40 | 2.00 ± 0.40 | 0.25 ± 0.005 [1] |" in md
    assert "| b | **99.50 ± 0.20** | **0.50 ± 0.20** | 0.39 [2] |" in md  # bold compares measured values only
    assert "- [1] Paper A, Table 1: r=3" in md and "unmeasured" not in md and "does not fix" not in md
    tex = latex.render_table(t, "accuracy")
    assert (
        r"0.25\textsuperscript{1}\\\scriptsize \ensuremath{\pm}0.005" in tex
        and r"\textsuperscript{2}Paper A, Table 1: base\par" in tex
    )
    assert "error, published (%) citation" in csv.render_table(t).splitlines()[0]


SWEEP = Layout(
    (
        TableSpec(
            "sweep",
            "Accuracy against eps",
            (SweepColumns("test_accuracy", "eps", "accuracy ({unit}) at eps", drop=(0.0,)),),
        ),
    )
)


class SweepSuite(AccuracySuite):
    sweep_columns = ("eps", "attack")
    layout = SWEEP


def sweep_records(attacks=("pgd",)):
    return [
        {
            "suite": "s",
            "model": m,
            "dataset": "mnist",
            "seed": s,
            "metric": "test_accuracy",
            "eps": e,
            "attack": a,
            "value": 90 - 100 * e + s + (m == "b"),
        }
        for m in ("a", "b")
        for s in (0, 1)
        for e in (0.0, 0.1, 0.2)
        for a in attacks
    ]


def test_sweep_columns_share_one_header_and_drop_values():
    t = table(sweep_records(), suite=SweepSuite, layout=SWEEP)
    assert [(h.group, h.label) for h in t.headers] == [("accuracy (%) at eps", "0.1"), ("accuracy (%) at eps", "0.2")]
    md = markdown.render_table(t)
    assert (
        md.startswith("**Accuracy against eps**; eps=… columns: accuracy (%) at eps")
        and "| model | eps=0.1 | eps=0.2 |" in md
    )
    tex = latex.tabular(t)
    assert (
        r"\multicolumn{2}{c}{\begin{tabular}[b]{@{}c@{}}accuracy (\%) at\\$\varepsilon$\end{tabular}}" in tex
    )  # wrapped to 2 columns, eps set as math (several seeds: no n in the header)
    assert r"\cmidrule(lr){2-3}" in tex


def test_a_sweep_the_layout_does_not_place_is_an_error():
    with pytest.raises(ValueError, match=r"differ in \['attack'\].*add them to `where`, `rows` or `describe`"):
        table(sweep_records(("pgd", "fgsm")), suite=SweepSuite, layout=SWEEP)


def test_long_tables_split_evenly_keeping_published_columns_with_their_column():
    headers = [Header(f"c{i}", f"c{i}") for i in range(10)]
    headers.insert(8, Header("p", "published", kind="published"))
    t = Table("t", "T", ["model"], [("a",)], headers, {(0, h.key): Measured(1.0, None, 1) for h in headers})
    parts = split_parts(t, 8)
    assert [[h.key for h in p.headers] for p in parts] == [[f"c{i}" for i in range(6)], ["c6", "c7", "p", "c8", "c9"]]
    assert [p.name for p in parts] == ["t", "t-2"] and parts[1].title == "T (part 2 of 2)"


def test_latex_escapes_every_special_character():
    assert latex.tex("a_b > c < d % & # ± – × $ {x} ~ ^ \\ s/t") == (
        r"a\_\allowbreak{}b \textgreater{} c \textless{} d \% \& \# \ensuremath{\pm} -- \ensuremath{\times} \$ \{x\} "
        r"\textasciitilde{} \textasciicircum{} \textbackslash{} s/\allowbreak{}t"
    )


def test_suite_files(tmp_path):
    SUITES.get("accuracy")  # loading it through the registry names AccuracySuite, which SweepSuite extends
    paths = write_suite(tmp_path, sweep_records(), SweepSuite).paths
    assert set(paths) == {"records.csv", "table.md", "table.tex", "table-narrow.tex", "table-sweep.csv"}
    assert not list(tmp_path.glob(".*.tmp"))
    frame = pd.read_csv(paths["records.csv"])
    assert list(frame.columns[:8]) == ["suite", "model", "dataset", "seed", "metric", "value", "eps", "attack"]
