"""The paper workflow as a user runs it, on real MNIST: `capsbench run` of every registered suite at the smoke budget
with that budget's own settings (nothing hand-picked), then `capsbench report`, its LaTeX compiled (report.tex, and
each suite's table-narrow.tex in a two-column article), the JSON a script reads, the model cards, and
`capsbench.evaluate`. Every command is a fresh `python -m capsbench` process, as typed in a shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_latex import ARTICLES, PACKAGES, compile_latex

from capsbench.suites import CATALOG

pytestmark = pytest.mark.slow
SUITES = CATALOG.names()


def capsbench(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capsbench", *args], capture_output=True, text=True, env=env,
                          timeout=1800)


@pytest.fixture(scope="module")
def workflow(tmp_path_factory, mnist_root):
    """Every suite run once, in one output folder and store, as `capsbench run suite=<s> budget=smoke --format json`
    (a shared checkpoint cache: accuracy and robustness train the same checkpoints)."""
    out = tmp_path_factory.mktemp("e2e")
    env = {**os.environ, "CAPSBENCH_DATA": str(mnist_root), "CAPSBENCH_CACHE": str(out / "cache")}
    env.pop("MLFLOW_TRACKING_URI", None)
    runs = {}
    for suite in SUITES:
        done = capsbench("run", f"suite={suite}", "budget=smoke", f"output_dir={out}", "data.download=false",
                         "--format", "json", env=env)
        assert done.returncode == 0, f"capsbench run suite={suite} budget=smoke:\n{done.stderr[-3000:]}"
        (runs[suite],) = json.loads(done.stdout)
    return out, env, runs


def test_every_run_says_its_values_and_record_count_in_json(workflow):
    _, _, runs = workflow
    for suite, run in runs.items():
        assert run["records"] > 0 and run["values"], suite
        for value in run["values"]:
            assert {"model", "seed", "metric", "value", "n", "ci_low", "ci_high"} <= set(value), (suite, value)
    worst = [v for v in runs["robustness"]["values"] if v.get("attack") == "worst_case"]
    assert worst and all(v["n"] == 100 and v["ci_low"] <= v["value"] <= v["ci_high"] for v in worst)
    assert {v["eps"] for v in worst} >= {0.05, 0.1}


def test_report_after_the_runs_exits_0_with_every_suite(workflow):
    out, env, _ = workflow
    done = capsbench("report", f"output_dir={out}", "--format", "json", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert sorted(s["suite"] for s in report["suites"]) == sorted(SUITES) and not report["skipped"]
    for section in report["suites"]:
        assert section["records"] > 0 and section["values"], section["suite"]
    robustness = next(s for s in report["suites"] if s["suite"] == "robustness")
    assert any(v.get("attack") == "worst_case" and v["eps"] == 0.1 for v in robustness["values"])


def test_the_report_compiles_as_latex(workflow, tmp_path):
    out, env, _ = workflow
    done = capsbench("report", f"output_dir={out}", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    root = out / "report"
    text = compile_latex((root / "report.tex").read_text(), root)
    # OT1's \_ is a rule, not a character: pdftotext reads robustness_l2's heading as "robustness l2"
    assert all(any(suite.replace("_", " ") in page for page in text) for suite in SUITES)


@pytest.mark.parametrize("suite", SUITES)
def test_each_narrow_table_compiles_in_a_two_column_paper(workflow, suite, tmp_path):
    out, _, _ = workflow
    (tmp_path / "table-narrow.tex").write_text((out / suite / "table-narrow.tex").read_text())
    compile_latex(ARTICLES["two-column"] + PACKAGES + "\\begin{document}\n\\input{table-narrow.tex}\n\\end{document}\n",
                  tmp_path)


def test_a_model_card_per_model_beside_the_tables(workflow):
    out, _, runs = workflow
    for suite, run in runs.items():
        models = sorted({v["model"] for v in run["values"]})
        for model in models:
            card = json.loads((out / suite / "model-cards" / f"{model}.json").read_text())
            assert card["model"] == model and card["suite"] == suite and card["budget"] == "smoke"
            assert card["capsbench"] and card["code_hash"] and card["values"]
            assert all(v["model"] == model for v in card["values"])
            if suite in ("accuracy", "robustness"):
                assert len(card["weights_sha256"]) == 1 and card["n"] > 0
    card = json.loads((out / "robustness" / "model-cards" / "capsnet.json").read_text())
    assert {"fgsm", "apgd", "apgd_targeted", "pgd_adaptive", "vote", "square"} <= set(card["attacks"])


def test_evaluate_returns_indexed_tables(workflow):
    out, env, _ = workflow
    script = (
        "import json, sys, capsbench\n"
        "e = capsbench.evaluate('cnn_9x9', 'robustness', budget='smoke', output_dir=sys.argv[1], progress=False,\n"
        "                       data={'download': False})\n"
        "t = e.tables['worst_case']\n"
        "print(json.dumps({'index': list(t.index), 'columns': [list(c) for c in t.columns],\n"
        "                  'value': float(t.loc['cnn_9x9', ('eps=0.1', 'mean')])}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads(done.stdout.strip().splitlines()[-1])
    assert table["index"] == ["cnn_9x9"]
    assert ["eps=0.1", "ci_low"] in table["columns"] and ["eps=0.1", "mean"] in table["columns"]
    records = pd.read_csv(Path(out) / "robustness" / "records.csv")
    worst = records.query("model == 'cnn_9x9' and attack == 'worst_case' and eps == 0.1")["value"]
    assert table["value"] == pytest.approx(float(worst.iloc[0]))
