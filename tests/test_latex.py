"""LaTeX a paper pastes as is: every suite's tables (hand-chosen records and records of real smoke runs) and the
standalone report.tex, built by a real TeX engine and rendered to PNG (pdftoppm): an error, a missing glyph or any
overfull box fails; a narrow table that fits one column is one float, a part never holds a single column, and every
float of report.tex is on the pages of its own section.

Locally the tests skip without a TeX engine; in CI (CI=true) they fail instead, and .ci/run installs the engine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest
import report_fixtures as fixtures
from suite_cases import CASES

from capsbench.reporting import verdicts
from capsbench.reporting.claim_files import load_claims
from capsbench.reporting.document import Document, Run, Section, render_latex
from capsbench.reporting.formatting import cell_text, count_decimals
from capsbench.reporting.latex import math, tex
from capsbench.reporting.model import Measured
from capsbench.reporting.outputs import write_suite
from capsbench.suites import CATALOG, SUITES

INSTALL = ("apt-get install -y --no-install-recommends texlive-latex-recommended texlive-latex-extra latexmk "
           "poppler-utils")
SMOKE = Path(__file__).parent / "fixtures" / "smoke"  # records.csv of smoke runs of each suite, kept: no training here
PACKAGES = "\\usepackage{booktabs}\n\\usepackage{graphicx}\n\\tracinglostchars=2\n"
ARTICLES = {"one-column": "\\documentclass{article}\n", "two-column": "\\documentclass[twocolumn]{article}\n"}
PREAMBLE = ARTICLES["one-column"] + PACKAGES
OVERFULL = re.compile(r"^Overfull \\[hv]box \(([0-9.]+)pt too (?:wide|high)\)", re.MULTILINE)


def engine() -> list[str]:
    """latexmk (reruns until references settle), else pdflatex once; skip without either, but never in CI."""
    if shutil.which("latexmk") and shutil.which("pdflatex"):
        return ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"]
    if shutil.which("pdflatex"):
        return ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"]
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"CI must compile the LaTeX, but no TeX engine was found; install it with `{INSTALL}` (.ci/run does)"
        )
    pytest.skip(f"no TeX engine: install one to run the LaTeX tests (Debian/Ubuntu: `{INSTALL}`, about a minute)")


def overflow_pt(log: str) -> list[float]:
    """How far each overfull box in a TeX log sticks out, in pt."""
    return [float(m) for m in OVERFULL.findall(log)]


def compile_latex(source: str, workdir: Path) -> list[str]:
    """Compile `source` as doc.tex in workdir; fail on an error, a missing character or any overfull box. Renders every
    page to workdir/page-<n>.png and returns each page's text (pdftotext), in reading order."""
    (workdir / "doc.tex").write_text(source)
    run = subprocess.run(engine(), cwd=workdir, capture_output=True, text=True, timeout=300)
    log = (workdir / "doc.log").read_text(errors="replace") if (workdir / "doc.log").exists() else run.stdout
    assert run.returncode == 0, f"TeX failed:\n{log[-4000:]}"
    errors = [line for line in log.splitlines() if line.startswith(("Missing character", "!"))]
    assert not errors, "\n".join(errors)
    overfull = [line for line in log.splitlines() if line.startswith("Overfull")]
    assert overflow_pt(log) == [], f"{sum(overflow_pt(log)):.1f} pt of overfull boxes:\n" + "\n".join(overfull)
    assert (workdir / "doc.pdf").read_bytes()[:4] == b"%PDF"
    return render(workdir / "doc.pdf")


def render(pdf: Path) -> list[str]:
    """Every page of `pdf` as <stem>-page-<n>.png beside it (pdftoppm, 60 dpi) and its text (pdftotext)."""
    for tool in ("pdftoppm", "pdftotext"):
        if not shutil.which(tool):
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI must render the LaTeX, but {tool} was not found; install it with `{INSTALL}`")
            pytest.skip(f"no {tool}: install poppler-utils to render the LaTeX tests")
    subprocess.run(["pdftoppm", "-png", "-r", "60", pdf.name, f"{pdf.stem}-page"], cwd=pdf.parent, check=True,
                   timeout=300)
    text = subprocess.run(["pdftotext", "-layout", pdf.name, "-"], cwd=pdf.parent, check=True, capture_output=True,
                          text=True, timeout=300).stdout
    pages = text.split("\f")[:-1] if text.endswith("\f") else text.split("\f")
    assert len(list(pdf.parent.glob(f"{pdf.stem}-page-*.png"))) == len(pages) > 0
    return pages


def floats_in_sections(pages: list[str]) -> dict[str, list[int]]:
    """Section number (or appendix letter) -> the pages of the floats whose captions ("Table 3:", "Figure 2:") come,
    in reading order, after its heading and before the next one's."""
    text = "\f".join(pages)
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"(?m)^\f?(\d+|[A-Z]) {3,}[A-Za-z][\w -]*$", text)]
    found: dict[str, list[int]] = {}
    for m in re.finditer(r"(?m)^[ \f]*(Table|Figure) \d+:", text):
        before = [name for at, name in heads if at < m.start()]
        assert before, f"{m.group(0).strip()} comes before every section heading"
        found.setdefault(before[-1], []).append(text[: m.start()].count("\f") + 1)
    return found


def single_column_parts(tex_text: str) -> list[str]:
    """The captions of table parts whose tabular holds a single value column."""
    out = []
    for float_text in re.findall(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", tex_text, re.DOTALL):
        spec = re.search(r"\\begin\{tabular\}\{(?:@\{\})?([lcr]+)", float_text).group(1)
        if "(part " in float_text and len(spec.lstrip("l")) == 1:
            out.append(re.search(r"\\caption\{(.*)\}", float_text).group(1))
    return out


def test_overflow_is_read_from_the_log_in_pt():
    log = "Overfull \\hbox (4.13747pt too wide) in paragraph at lines 33--57\n[][]\nUnderfull \\hbox (badness 10000)\n"
    assert overflow_pt(log) == [4.13747]
    assert overflow_pt("Overfull \\vbox (2.5pt too high) has occurred") == [2.5]


def suite_records(name: str) -> list[tuple[str, list[dict], list[dict]]]:
    """(label, records, published) of the suite: the hand-chosen records and those of a real smoke run."""
    make, published = CASES[name]
    smoke = pd.read_csv(SMOKE / f"{name}.csv").to_dict("records")
    return [("hand", make(), published()), ("smoke", smoke, [])]


def notes(name: str, records: list[dict]) -> list[str]:
    return SUITES.get(name)().notes(records, CATALOG.get(name).params())


def test_every_case_has_smoke_records_too():
    assert set(CASES) <= set(SUITES) and set(CASES) == {p.stem for p in SMOKE.glob("*.csv")}


# Each layout in the articles it is for: table* floats (table.tex) in a one-column paper and across both columns of a
# two-column paper; table floats of one column's width (table-narrow.tex) in a two-column paper.
LAYOUTS = [("table.tex", "one-column"), ("table.tex", "two-column"), ("table-narrow.tex", "two-column")]


@pytest.mark.parametrize("file,article", LAYOUTS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_latex_tables_of_every_suite_compile_without_overfull_boxes(name, file, article, tmp_path):
    inputs = []
    for label, records, published in suite_records(name):
        output = write_suite(tmp_path / label, records, SUITES.get(name), published, notes=notes(name, records))
        inputs.append(f"\\input{{{output.paths[file].relative_to(tmp_path).as_posix()}}}\n\\clearpage")
        assert single_column_parts(output.paths[file].read_text()) == []
    compile_latex(ARTICLES[article] + PACKAGES + "\\begin{document}\n" + "\n".join(inputs) + "\n\\end{document}\n",
                  tmp_path)


def test_narrow_robustness_tables_with_chosen_eps_fit_one_column(tmp_path):
    _, records, published = suite_records("robustness")[1]
    output = write_suite(tmp_path, records, SUITES.get("robustness"), published, notes=notes("robustness", records),
                         narrow_eps=[0.1, 0.2, 0.3])
    text = output.paths["table-narrow.tex"].read_text()
    assert "part 1 of" not in text  # clean and three eps columns: one table each, no parts
    assert "\\begin{table}[t]" in text and "table*" not in text
    compile_latex(ARTICLES["two-column"] + PACKAGES + "\\begin{document}\n\\input{table-narrow.tex}\n\\end{document}\n",
                  tmp_path)


def test_the_default_robustness_run_is_one_float_per_table_in_one_column(tmp_path):
    records = fixtures.robustness_default()  # three models, 1,000 images, six eps above 0, one seed
    text = write_suite(tmp_path, records, SUITES.get("robustness"), [], notes=notes("robustness", records)).paths[
        "table-narrow.tex"].read_text()
    captions = re.findall(r"\\caption\{(.*)\}", text)
    assert captions == [r"Robust accuracy under the per-image worst case over all attacks ($\ell_\infty$)",
                        r"Robust accuracy per attack ($\ell_\infty$)"]
    assert "n~=~1,000" in text and "table*" not in text and "85.3--" not in text  # intervals: in table.tex
    paper = ARTICLES["two-column"] + PACKAGES + "\\begin{document}\n\\input{table-narrow.tex}\n\\end{document}\n"
    pages = compile_latex(paper, tmp_path)
    assert [re.findall(r"Table \d+:", page) for page in pages] == [["Table 1:", "Table 2:"]]  # one float each


def test_a_narrow_table_that_cannot_fit_is_split_by_eps_never_leaving_clean_alone(tmp_path):
    records = fixtures.robustness_default(images=10_000)  # budget=paper's full test set: two decimals, wider columns
    text = write_suite(tmp_path, records, SUITES.get("robustness"), [], notes=notes("robustness", records)).paths[
        "table-narrow.tex"].read_text()
    captions = re.findall(r"\\caption\{.*\(part (\d) of \d: (.*)\)\}", text)
    assert captions[0][1].startswith(r"clean, $\varepsilon$=0.05") and single_column_parts(text) == []
    assert all(r"$\varepsilon$=" in label for _, label in captions)
    compile_latex(ARTICLES["two-column"] + PACKAGES + "\\begin{document}\n\\input{table-narrow.tex}\n\\end{document}\n",
                  tmp_path)


def one_model_report(root: Path, model: str = "capsnet") -> Document:
    """The report of one model's robustness (default run) and accuracy runs, with a setting changed in each."""
    when = datetime(2026, 11, 21, tzinfo=timezone.utc)
    sections = []
    for name, records in (("accuracy", fixtures.accuracy()), ("robustness", fixtures.robustness_default())):
        records = [r for r in records if r["model"] == model]
        output = write_suite(root / name, records, SUITES.get(name), [], notes=notes(name, records))
        seeds = {model: sorted({int(r["seed"]) for r in records})}
        sections.append(Section(name, SUITES.get(name).description, output, "quick", "0.1.0", ["mnist"],
                                [Run("0123456789abcdef", when, str(seeds[model]))], seeds, {}, {model: {}},
                                {"train.epochs": "2", "model_args.capsnet.routing_iterations": "1"}))
    return Document(when, "mlflow.db (experiment capsbench)", "none", sections)


def test_a_one_model_report_fits_four_pages_with_every_float_in_its_section(tmp_path):
    root = tmp_path / "report"
    doc = one_model_report(root)
    source = render_latex(doc, root)
    assert "table*" not in source and "[!htbp]" in source and "\\usepackage[section]{placeins}" in source
    assert "ray." not in source and "slurm." not in source and "Claims" not in source
    pages = compile_latex(source, root)
    assert len(pages) <= 4, f"{len(pages)} pages"
    floats = floats_in_sections(pages)
    per_section = {str(i): len(s.output.tables) + len(s.output.figures) for i, s in enumerate(doc.sections, 1)}
    assert {k: len(v) for k, v in floats.items()} == per_section, floats
    assert "train.epochs = 2" in pages[-1] and re.search(r"A +Settings", pages[-1])  # the appendix, last


def test_latex_report_of_every_suite_compiles_on_its_own(tmp_path):
    root = tmp_path / "report"
    when = datetime(2026, 11, 21, tzinfo=timezone.utc)
    sections = []
    for name in sorted(CASES):
        _, records, published = suite_records(name)[1]
        output = write_suite(root / name, records, SUITES.get(name), published, notes=notes(name, records))
        seeds = {
            m: sorted({int(r["seed"]) for r in records if r["model"] == m})
            for m in dict.fromkeys(r["model"] for r in records)
        }
        sections.append(
            Section(
                name,
                SUITES.get(name).description,
                output,
                "smoke",
                "0.1.0",
                ["mnist"],
                [Run("0123456789abcdef", when, "[0]")],
                seeds,
                {"train.epochs": "3", "params.eps.mnist": "[0.0, 0.05, 0.1]", "data.test_subset": "500"},
                {m: {"routing_iterations": "3", "decoder_hidden": "[64, 128]"} for m in seeds},
            )
        )
    assert all(s.output.figures for s in sections if s.suite in ("affine", "robustness", "routing"))
    claims = verdicts.judge_all(
        load_claims(), {s.suite: verdicts.Run(s.output.frame, s.model_args, s.settings, s.budget) for s in sections}
    )
    store = "sqlite:////tmp/pytest-of-root/pytest-61/test_latex_of_the_report_comma0/tracked0/mlflow.db"
    doc = Document(when, f"{store} (experiment capsbench)", "budget=smoke", sections, claims=claims)
    source = render_latex(doc, root)
    floats = floats_in_sections(compile_latex(source, root))
    with_floats = [str(i) for i, s in enumerate(sections, 1) if s.output.tables or s.output.figures]
    assert sorted(floats) == sorted(with_floats)  # each float after its own section's heading, before the next


def test_latex_of_the_report_command_compiles(tracked_store, tmp_path):
    from typer.testing import CliRunner

    from capsbench.cli import app

    uri, _, _ = tracked_store
    result = CliRunner().invoke(app, ["report", f"output_dir={tmp_path}", f"tracking.uri={uri}"])
    assert result.exit_code == 0, result.output
    root = tmp_path / "report"
    compile_latex((root / "report.tex").read_text(), root)


def test_decimals_follow_n():
    assert [count_decimals(n) for n in (50, 100, 200, 1000, 1001, 10_000, 26_032)] == [0, 0, 1, 1, 2, 2, 2]
    one_seed = [cell_text(Measured(99.5, None, 1, (97.2, 99.9, n)), "%", 1).main for n in (100, 200, 10_000)]
    assert one_seed == ["100", "99.5", "99.50"]  # at n = 100 every value is a whole number of images


def test_flags_are_marks_on_the_model_and_diagnostics_follow_the_float(tmp_path):
    records = fixtures.robustness()
    text = write_suite(tmp_path, records, SUITES.get("robustness"), [], notes=notes("robustness", records)).paths[
        "table.tex"
    ].read_text()
    worst = text.split(r"\end{table*}")[0]
    assert "flags" not in worst and " ok " not in worst  # no column of flags
    assert r"capsnet\textsuperscript{A}" in worst and r"effcapsnet\textsuperscript{B,Z,A}" in worst
    assert "Marks on a model: a masking check fired in some seed (A = adaptive\\_\\allowbreak{}stronger" in worst
    after = text.split(r"\end{table*}")[1].split(r"\begin{table*}")[0]
    assert after.startswith("\n% FLAG capsnet / mnist seed 0: adaptive_stronger")  # for the author, not the reader
    assert r"\caption{Robust accuracy under the per-image worst case over all attacks ($\ell_\infty$)}" in worst
    assert r"at $\varepsilon$,\\n~=~200" in worst  # math, and n on a line of its own that never breaks
    assert "FLAG" in render_latex_remarks(records)


def render_latex_remarks(records: list[dict]) -> str:
    """The worst-case table as the report sets it: its remarks as text after the float."""
    from capsbench.reporting.frame import records_frame
    from capsbench.reporting.latex import render_table
    from capsbench.reporting.outputs import suite_layout
    from capsbench.reporting.tables import build_tables

    suite = SUITES.get("robustness")
    tables = build_tables(records_frame(records, suite), suite, suite_layout(suite), [], notes("robustness", records))
    out = render_table(tables[0], "robustness", remarks="text")
    return out.split(r"\end{table*}")[1]


def test_math_is_the_word_not_part_of_an_identifier():
    assert math(tex("at eps=0.1 (L-inf)")) == r"at $\varepsilon$=0.1 ($\ell_\infty$)"
    assert math(tex("monotone_in_eps, eps0_equals_clean")) == tex("monotone_in_eps, eps0_equals_clean")
