"""`capsbench report` on a real MLflow store of two invocations: seeds combined, published numbers, one report."""

import re
from statistics import mean, stdev

import pytest
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.reporting.formatting import format_value


def report(uri, out, *extra):
    return CliRunner().invoke(app, ["report", f"output_dir={out}", f"tracking.uri={uri}", *extra])


@pytest.fixture(scope="module")
def built(tracked_store, tmp_path_factory):
    uri, _, records = tracked_store
    out = tmp_path_factory.mktemp("report")
    result = report(uri, out)
    assert result.exit_code == 0, result.output
    return out / "report", records, result.output


def test_report_combines_both_invocations_seed_by_seed(built):
    root, records, output = built
    md = (root / "accuracy" / "table.md").read_text()
    assert "- four seeds; mean ± sample std" in md
    for model in ("capsnet", "cnn_sabour"):
        accs = [r["value"] for r in records if r["model"] == model and r["metric"] == "test_accuracy"]
        assert len(accs) == 4
        m, s = format_value(mean(accs), stdev(accs), "%")
        assert re.search(rf"\| {model}†? \| (\*\*)?{re.escape(m)} ± {re.escape(s)}", md), (
            md
        )  # † undertrained (synthetic data)
    assert "| capsnet" in output and "report: " in output and "report.tex" in output


def test_report_puts_sabour_numbers_beside_measured_ones(built):
    root, _, _ = built
    md = (root / "accuracy" / "table.md").read_text()
    assert re.search(r"\| capsnet†? \|.*\| 0\.25 ± 0\.005 \[\d\] \|", md), md  # smoke CapsNet: r=3 with decoder
    assert re.search(r"\| cnn_sabour†? \|.*\| 0\.39 \[\d\] \|", md), md
    assert "Dynamic Routing Between Capsules" in md and "Table 1" in md


def test_report_links_every_file(built):
    root, _, _ = built
    report = (root / "report.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", report)
    assert {"accuracy/table.md", "accuracy/table.tex", "accuracy/table-accuracy.csv", "accuracy/records.csv"} <= set(
        links
    )
    assert all((root / link).exists() for link in links)
    assert report.count("started") == 2  # both invocations are listed
    assert "Seeds: capsnet [0, 1, 2, 3]; cnn_sabour [0, 1, 2, 3]." in report and "Budget smoke, capsbench" in report
    assert "Settings that differ from budget smoke's defaults: train.epochs = 1." in report  # and nothing else
    assert "## Claims" not in report  # only with claims=true


def test_report_tex_is_a_standalone_document(built):
    root, _, _ = built
    tex = (root / "report.tex").read_text()
    assert tex.startswith("\\documentclass{article}") and tex.rstrip().endswith("\\end{document}")
    assert "\\label{tab:accuracy-accuracy}" in tex and "Dynamic Routing Between Capsules" in tex


def test_report_over_a_smoke_run_gives_no_verdict(tracked_store, tmp_path):
    """With claims=true every claim is judged, but smoke records meet no claim's protocol: no supported, refuted or not
    resolved in the printed table, report.md or report.tex."""
    uri, _, _ = tracked_store
    result = CliRunner().invoke(app, ["report", f"output_dir={tmp_path}", f"tracking.uri={uri}", "claims=true"])
    assert result.exit_code == 0, result.output
    root, output = tmp_path / "report", result.output
    report, tex = (root / "report.md").read_text(), (root / "report.tex").read_text()
    assert "## Claims" in output and "## Claims" in report and "Verdict rule:" in report
    rows = {line.split(" | ")[0].lstrip("| "): line for line in report.splitlines() if line.startswith("| ")}
    r3 = rows["CapsNet (3 routing iterations, reconstruction) has a lower MNIST test error than the baseline CNN"]
    assert "| 0.25 vs 0.39 |" in r3 and "**protocol not met** (smoke, 4 seeds) | budget=quick or budget=paper |" in r3
    speed = rows["CapsNets are about 10x slower than CNNs per forward pass"]
    assert "**no records** |" in speed and "capsbench run suite=claims claims=[circulated-speed]" in speed
    for text in (output, report, tex):
        assert not any(f"{{{v}}}" in text or f"**{v}**" in text for v in ("supported", "refuted", "not resolved"))
    assert "Capsule-network comparison table circulated without a primary source" in report


def test_filters_that_match_nothing_explain_what_exists(tracked_store, tmp_path):
    uri, _, _ = tracked_store
    result = report(uri, tmp_path, "budget=paper")
    assert result.exit_code == 2 and "no finished runs" in result.output and "accuracy/smoke/mnist" in result.output
    result = report(uri, tmp_path, "suite=acuracy")
    assert result.exit_code == 2 and "did you mean 'accuracy'" in result.output
    result = report(uri, tmp_path, "since=2026-12-01", "until=2026-11-01")
    assert result.exit_code == 2 and "since=2026-12-01 is after until=2026-11-01, so no run can match" in result.output
    result = report(f"sqlite:///{tmp_path / 'none.db'}", tmp_path)
    assert result.exit_code == 2 and "no MLflow store" in result.output and not (tmp_path / "none.db").exists()
    (tmp_path / "empty.db").touch()  # SQLite reads an empty file as an empty database: MLflow filled it with tables
    result = report(f"sqlite:///{tmp_path / 'empty.db'}", tmp_path)
    assert result.exit_code == 2 and "(an empty file)" in result.output and (tmp_path / "empty.db").stat().st_size == 0


def test_report_embeds_figures_and_flags_short_budgets(tmp_path):
    from datetime import datetime, timezone

    import pandas as pd

    from capsbench.reporting.document import Document, Run, Section, render_latex, render_markdown
    from capsbench.reporting.outputs import SuiteOutput

    root = tmp_path / "report"
    stem = root / "accuracy" / "acc_vs_eps"
    paths = {name: root / "accuracy" / name for name in ("table.md", "acc_vs_eps.png", "acc_vs_eps.pdf")}
    output = SuiteOutput([], [stem], paths, pd.DataFrame({"n": [500.0, 500.0]}))
    when = datetime(2026, 11, 21, tzinfo=timezone.utc)
    section = Section(
        "accuracy",
        "clean accuracy",
        output,
        "quick",
        "0.1.0",
        ["mnist"],
        [Run("r1", when, "[0, 1]")],
        {"capsnet": [0, 1]},
        {"train.epochs": "4"},
        {"capsnet": {"routing_iterations": "3"}},
    )
    doc = Document(when, "sqlite:///x.db", "budget=quick", [section])
    text = render_markdown(doc, root)
    assert "![acc_vs_eps](accuracy/acc_vs_eps.png)" in text and "[acc_vs_eps.pdf](accuracy/acc_vs_eps.pdf)" in text
    assert "filters: budget=quick" in text and "Budget quick narrows the models" in text
    assert "Seeds: capsnet [0, 1]." in text and "n = 500 test items per accuracy" in text
    assert "Run `r1` started 2026-11-21 00:00 UTC" in text and "defaults: none." in text
    assert "accuracy: acc against eps; budget quick; n = 500 test items; seeds 0, 1" in text  # the figure's caption
    assert "\\includegraphics[width=3.3in]{accuracy/acc_vs_eps.pdf}" in render_latex(doc, root)


def test_a_figure_caption_names_the_attacks_measured_not_a_phase_timed(tmp_path):
    from datetime import datetime, timezone

    import pandas as pd

    from capsbench.reporting.document import Run, Section, figure_caption
    from capsbench.reporting.outputs import SuiteOutput

    frame = pd.DataFrame({"n": [100.0, 100.0, 100.0, None], "attack": ["fgsm", "apgd", "worst_case", "row_engine"]})
    stem = tmp_path / "robustness" / "robust_accuracy_vs_eps"
    section = Section("robustness", "robust accuracy", SuiteOutput([], [stem], {}, frame), "smoke", "0.1.0", ["mnist"],
                      [Run("r1", datetime(2026, 11, 21, tzinfo=timezone.utc), "[0]")], {"capsnet": [0]}, {}, {})
    caption = figure_caption(section, stem)
    assert "attacks fgsm, apgd (worst case: per image, over all of them)" in caption and "row_engine" not in caption
