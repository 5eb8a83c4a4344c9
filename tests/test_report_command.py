"""`capsbench report` on a real MLflow store of two invocations: seeds combined, published numbers, LaTeX compiles."""

import re
import shutil
import subprocess
from statistics import mean, stdev

import pytest
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.report import format_value


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
    assert "n = 4 seed(s)" in md
    for model in ("capsnet", "cnn_sabour"):
        accs = [r["value"] for r in records if r["model"] == model and r["metric"] == "test_accuracy"]
        assert len(accs) == 4
        m, s = format_value(mean(accs), stdev(accs), "%")
        assert re.search(rf"\| {model} \| (\*\*)?{re.escape(m)} ± {re.escape(s)}", md), md
    assert "| capsnet |" in output and "summary:" in output


def test_report_puts_sabour_numbers_beside_measured_ones(built):
    root, _, _ = built
    md = (root / "accuracy" / "table.md").read_text()
    assert re.search(r"\| capsnet \|.*\| 0\.25 ± 0\.005 \[\d\] \|", md), md  # smoke CapsNet: r=3 with decoder
    assert re.search(r"\| cnn_sabour \|.*\| 0\.39 \[\d\] \|", md), md
    assert "Dynamic Routing Between Capsules" in md and "Table 1" in md


def test_summary_links_every_file(built):
    root, _, _ = built
    summary = (root / "summary.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", summary)
    assert {"accuracy/table.md", "accuracy/table.tex", "accuracy/table.csv", "accuracy/records.csv"} <= set(links)
    assert all((root / link).exists() for link in links)
    assert summary.count("started") == 2  # both invocations are listed


def test_filters_that_match_nothing_explain_what_exists(tracked_store, tmp_path):
    uri, _, _ = tracked_store
    result = report(uri, tmp_path, "budget=paper")
    assert result.exit_code == 2 and "no finished runs" in result.output and "accuracy/smoke/mnist" in result.output
    result = report(uri, tmp_path, "suite=acuracy")
    assert result.exit_code == 2 and "did you mean 'accuracy'" in result.output
    result = report(f"sqlite:///{tmp_path / 'none.db'}", tmp_path)
    assert result.exit_code == 2 and "no MLflow store" in result.output and not (tmp_path / "none.db").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (Debian: apt-get install texlive-latex-base texlive-latex-recommended)")
def test_latex_table_compiles_with_booktabs(built, tmp_path):
    root, _, _ = built
    doc = tmp_path / "doc.tex"
    doc.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
                   f"\\input{{{(root / 'accuracy' / 'table.tex').as_posix()}}}\n\\end{{document}}\n")
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    assert (tmp_path / "doc.pdf").read_bytes()[:4] == b"%PDF"


def test_summary_embeds_plots_and_flags_short_budgets(tmp_path):
    from datetime import datetime, timezone

    from capsbench.collect import Invocation
    from capsbench.config import compose_report
    from capsbench.summary import SuiteReport, summary_markdown

    root = tmp_path / "report"
    inv = Invocation("r1", datetime(2026, 11, 21, tzinfo=timezone.utc), "accuracy", "quick", "0.1.0", {"dataset": "mnist", "seeds": "[0, 1]"})
    paths = {name: root / "accuracy" / name for name in ("table.md", "acc_vs_eps.png", "acc_vs_eps.pdf")}
    rep = SuiteReport("accuracy", [inv], {"capsnet": [0, 1]}, paths, "| model |\n")
    text = summary_markdown([rep], compose_report([f"output_dir={tmp_path}", "budget=quick"]), root)
    assert "![acc_vs_eps](accuracy/acc_vs_eps.png)" in text and "[acc_vs_eps.pdf](accuracy/acc_vs_eps.pdf)" in text
    assert "filters: budget=quick" in text and "Budget `quick` narrows the models" in text
    assert "Seeds in the table: capsnet [0, 1]." in text
