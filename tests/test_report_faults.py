"""`capsbench report` on stores with faults: runs of different code versions are refused with one line
naming their commits (code= picks one); a corrupt or missing records.csv artifact is named and its run skipped; a run
whose unit failed contributes its finished units and is never the reason for a refusal; a suite whose runs conflict is
skipped with its reason while the others are reported (exit 3), latest=true takes each suite's newest runs measured
alike; no output holds an absolute local path. The stores are written by the Tracker with fixed records
(tests/report_fixtures.py), no training."""

import json
import logging
from pathlib import Path

import pytest
from composing import compose
from mlflow.tracking import MlflowClient
from report_fixtures import accuracy, robustness_default
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config.compose import to_dict, to_yaml
from capsbench.reporting.outputs import write_suite
from capsbench.run.units import UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.tracking import Tracker, flatten
from capsbench.util.uris import sqlite_uri
from capsbench.util.version import __version__

CODE_A, CODE_B = "a" * 64, "b" * 64


def invocation(out: Path, seeds: list[int], *, code: str | None = CODE_A, commit: str = "1" * 40,
               dirty: bool = False, failing: str | None = None, suite: str = "accuracy", budget: str = "smoke",
               settings: tuple[str, ...] = ()) -> str:
    """One logged `capsbench run suite=<suite> budget=<budget>` of the fixed records of `seeds` (robustness: capsnet's
    records of the default run); `failing`: a model whose unit failed (no records, no model arguments), which makes the
    parent FAILED; `settings`: more key=value settings of the command. Returns the parent's run id."""
    uri = sqlite_uri(out / "mlflow.db")
    cfg = compose([f"suite={suite}", f"budget={budget}", "device=cpu", "threads=1", f"output_dir={out}", *settings])
    tracker = Tracker(uri=uri, experiment="capsbench", artifact_root=out / "mlartifacts")
    tags = {"suite": suite, "budget": budget, "version.capsbench": __version__, "git.commit": commit,
            "git.dirty": str(dirty).lower(), **({"code.hash": code} if code else {})}
    parent = tracker.start_parent(f"{suite}-{budget}", flatten(to_dict(cfg)), tags, to_yaml(cfg))
    fixed = accuracy() if suite == "accuracy" else robustness_default(("capsnet",))
    records = [r for r in fixed if r["seed"] in seeds and r["model"] != failing]
    for model in dict.fromkeys(r["model"] for r in fixed):
        for seed in seeds:
            spec = UnitSpec(suite, model, seed, {}, {"dataset": "mnist", "threads": 1, "data": {}})
            done = model != failing
            result = UnitResult(key=spec.key, spec=spec, status="done" if done else "failed",
                                records=[r for r in records if (r["model"], r["seed"]) == (model, seed)],
                                params={"model_args.width": 8} if done else {},
                                error=None if done else "ValueError: kernel larger than the image")
            tracker.log_unit(parent, result, tags, SUITES.get(suite).sweep_columns, reused=False)
    paths = write_suite(out / f"{suite}-{parent}", records, SUITES.get(suite)).paths
    tracker.finish_parent(parent, {}, [paths["records.csv"]], failed="1 unit(s) failed" if failing else None)
    return parent


def report(out: Path, *extra: str):
    return CliRunner().invoke(app, ["report", f"output_dir={out}", *extra])


def artifact(out: Path, run_id: str) -> Path:
    uri = MlflowClient(sqlite_uri(out / "mlflow.db")).get_run(run_id).info.artifact_uri
    return Path(uri.removeprefix("file://")) / "records.csv"


def test_runs_of_two_code_versions_are_refused_naming_their_commits(tmp_path):
    invocation(tmp_path, [0], code=CODE_A, commit="c0ffee" + "0" * 34)
    invocation(tmp_path, [1], code=CODE_B, commit="c0ffee" + "0" * 34, dirty=True)
    result = report(tmp_path)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "suite 'accuracy' has runs measured by 2 versions of the code: aaaaaaaaaaaa (commit c0ffee000000," in line
    assert "bbbbbbbbbbbb (commit c0ffee000000+dirty," in line and "choose one with code=bbbbbbbbbbbb" in line
    picked = report(tmp_path, "code=bbbbbbbbbbbb")
    assert picked.exit_code == 0, picked.output
    assert "- one seed" in (tmp_path / "report" / "accuracy" / "table.md").read_text()


def test_a_run_logged_before_code_hashes_is_told_apart_by_its_commit(tmp_path):
    invocation(tmp_path, [0], code=None, commit="d1" * 20, dirty=True)
    invocation(tmp_path, [1], code=CODE_A, commit="d1" * 20)
    (line,) = report(tmp_path).output.strip().splitlines()
    assert "2 versions of the code: untagged (commit d1d1d1d1d1d1+dirty, latest run " in line
    assert "aaaaaaaaaaaa (commit d1d1d1d1d1d1, latest run " in line and "choose one with code=aaaaaaaaaaaa" in line


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_corrupt_or_missing_records_artifact_is_named_and_its_run_skipped(tmp_path, damage, caplog):
    invocation(tmp_path, [0])
    broken = invocation(tmp_path, [1])
    path = artifact(tmp_path, broken)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    else:
        path.unlink()
    with caplog.at_level(logging.WARNING, logger="capsbench.reporting.collect"):
        result = report(tmp_path)
    assert result.exit_code == 0, result.output
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"skipping run {broken} (accuracy of ")
    assert ("differs from the one logged" if damage == "truncated" else "cannot be read") in warning
    assert "- one seed" in (tmp_path / "report" / "accuracy" / "table.md").read_text()


def test_a_report_of_only_unreadable_runs_is_one_line(tmp_path):
    artifact(tmp_path, invocation(tmp_path, [0])).write_text("suite,model\n")
    result = report(tmp_path)
    assert result.exit_code == 2 and "none of the selected runs has readable records" in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1


def test_a_run_with_a_failed_unit_is_never_the_reason_for_a_refusal(tmp_path):
    invocation(tmp_path, [0])
    failed = invocation(tmp_path, [1], failing="capsnet")
    client = MlflowClient(sqlite_uri(tmp_path / "mlflow.db"))
    assert client.get_run(failed).info.status == "FAILED"
    result = report(tmp_path)
    assert result.exit_code == 0, result.output
    table = (tmp_path / "report" / "accuracy" / "table.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| c")}
    assert "(n=1)" in rows["capsnet"] and "(n=1)" not in rows["cnn_sabour"]  # the failed unit adds no seed


def test_a_suite_whose_runs_conflict_is_skipped_and_the_others_are_reported(tmp_path):
    invocation(tmp_path, [0])
    invocation(tmp_path, [0], suite="robustness", budget="smoke")
    newest = invocation(tmp_path, [0], suite="robustness", budget="quick")
    result = report(tmp_path)
    assert result.exit_code == 3, result.output
    (skipped,) = [line for line in result.output.splitlines() if line.startswith("skipped: ")]
    assert "suite 'robustness' has runs of budgets quick, smoke" in skipped
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## accuracy" in md and "## robustness" not in md and "Not reported: suite 'robustness'" in md
    assert "## Claims" not in md and "claims" not in (tmp_path / "report" / "report.tex").read_text().lower()

    latest = report(tmp_path, "latest=true", "--format", "json")
    assert latest.exit_code == 0, latest.output
    suites = {s["suite"]: s for s in json.loads(latest.stdout)["suites"]}
    assert set(suites) == {"accuracy", "robustness"} and suites["robustness"]["runs"] == [newest]


def test_the_claims_table_only_when_asked_and_no_absolute_path_in_any_output(tmp_path):
    invocation(tmp_path, [0])
    assert report(tmp_path).exit_code == 0
    assert "## Claims" not in (tmp_path / "report" / "report.md").read_text()
    result = report(tmp_path, "claims=true")
    assert result.exit_code == 0, result.output
    root = tmp_path / "report"
    assert "## Claims" in (root / "report.md").read_text() and "Verdict rule" in (root / "report.tex").read_text()
    for path in (p for p in tmp_path.joinpath("runs").rglob("*") if p.suffix in (".md", ".tex", ".csv")):
        text = path.read_text()
        assert str(tmp_path) not in text and "/root/" not in text and "/tmp/" not in text, path
    runs = sorted(tmp_path.joinpath("runs").glob("*/*/report"))
    assert len(runs) == 2  # each report in its own folder; report/ holds the latest's files
    assert (runs[-1] / "report.md").read_text() == (root / "report.md").read_text()


@pytest.mark.slow
def test_a_run_measured_again_with_remeasure_shares_the_table_of_the_first(tmp_path):
    """remeasure=true says that the units were measured again, not how: the run and the same run with remeasure=true
    are reported together (the later measurement of each seed counts)."""
    invocation(tmp_path, [0])
    invocation(tmp_path, [0], settings=("remeasure=true",))
    result = report(tmp_path)
    assert result.exit_code == 0, result.output
    assert "different settings" not in result.output
