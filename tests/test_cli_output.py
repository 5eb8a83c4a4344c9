"""What the commands print: -h beside --help, examples never wrapped mid-command, --format shown as its choices, and
JSON (alone on stdout) from run, train and report for scripts."""

import json
from pathlib import Path

import pytest
from conftest import make_splits
from typer.testing import CliRunner

from capsbench.cli import app

SMOKE = ["budget=smoke", "train.epochs=1", "device=cpu", "tracking.enabled=false"]


@pytest.mark.parametrize("command", [[], ["run"], ["train"], ["report"], ["list"], ["show-config"]])
def test_help_keeps_every_example_on_one_line(command):
    result = CliRunner().invoke(app, [*command, "-h"], prog_name="capsbench", terminal_width=60)
    assert result.exit_code == 0 and "Usage: capsbench" in result.output
    block = []
    for line in result.output.split("Examples:")[1].splitlines()[1:]:
        if line and not line.startswith("    "):  # the next paragraph or section
            break
        block.append(line.strip())
    examples = [line for line in block if line]
    assert len(examples) >= 2 and all(line.startswith("capsbench ") for line in examples)  # none wraps onto the next
    if command in (["run"], ["train"], ["report"], ["list"]):
        assert "--format [text|json]" in result.output


def test_run_and_train_print_json_alone_on_stdout(tmp_path, monkeypatch):
    from capsbench.run import execute

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    runner = CliRunner()
    args = ["run", "suite=accuracy", "models=[cnn_sabour]", f"output_dir={tmp_path}", *SMOKE, "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    (suite,) = json.loads(result.stdout)
    assert suite["suite"] == "accuracy" and suite["budget"] == "smoke" and suite["records"] > 0
    assert suite["missing"] == [] and Path(suite["files"]["table.md"]).exists()
    assert set(suite["headline"]["cnn_sabour"]) == {"test_accuracy", "test_error"}  # the numbers, not only paths
    assert suite["headline"]["cnn_sabour"]["test_accuracy"] == pytest.approx(100 - suite["headline"]["cnn_sabour"][
        "test_error"])
    assert Path(suite["latest"]) == tmp_path / "accuracy"
    assert suite["mlflow"]["run_id"] is None  # tracking off

    args = ["train", "model=cnn_sabour", f"output_dir={tmp_path}", *SMOKE, "--format", "json"]
    trained = json.loads(runner.invoke(app, args).stdout)
    assert trained["model"] == "cnn_sabour" and trained["source"] == "cache"  # the run above trained it
    assert Path(trained["checkpoint"]).exists() and len(trained["history"]) == 1


def test_report_prints_json(tracked_store, tmp_path):
    uri, _, _ = tracked_store
    result = CliRunner().invoke(app, ["report", f"output_dir={tmp_path}", f"tracking.uri={uri}", "claims=true",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert Path(report["report"]["latex"]).exists() and [s["suite"] for s in report["suites"]] == ["accuracy"]
    assert len(report["suites"][0]["runs"]) == 2 and "table-narrow.tex" in report["suites"][0]["files"]
    assert report["claims"] and {"id", "verdict", "statement"} <= set(report["claims"][0]) and report["skipped"] == {}


def test_a_one_seed_run_says_what_one_seed_compares_and_how_to_compare_models(tmp_path, monkeypatch):
    from capsbench.run import execute

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    args = ["run", "suite=accuracy", "models=[cnn_sabour]", f"output_dir={tmp_path}", *SMOKE]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "one training seed: the tables compare these trained weights, not the architectures" in result.stdout
    assert "add seeds=[0,1,2] to the command" in result.stdout
    seeds = CliRunner().invoke(app, [*args, "seeds=[0,1]"])
    assert seeds.exit_code == 0 and "one training seed" not in seeds.stdout
