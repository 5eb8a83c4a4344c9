"""The held-out checks in benchmarks/ end on bad input as capsbench does: one line naming what was expected, exit
status 2, for a records file that is missing, unreadable or holds nothing to check."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def held_out():
    spec = importlib.util.spec_from_file_location("held_out", BENCHMARKS / "held_out.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it as a run's records.jsonl"),
    ("{not json\n", "cannot read it as a run's records.jsonl"),
    (json.dumps({"metric": "robust_accuracy", "value": 0.5}) + "\n", "holds no minimal_distance records: run it"),
])
def test_bad_records_end_in_one_line_and_exit_status_2(tmp_path, capsys, content, message):
    path = tmp_path / "records.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        held_out().run_records(path, "minimal_distance", "run it")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_records_of_the_metric_are_returned(tmp_path):
    path = tmp_path / "records.jsonl"
    rows = [{"metric": "minimal_distance", "value": 1.0}, {"metric": "clean_accuracy", "value": 0.99}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    assert held_out().run_records(path, "minimal_distance", "run it") == rows[:1]


@pytest.mark.slow  # two fresh interpreters importing torch
@pytest.mark.parametrize("script", ["minimal_check.py", "affine_worst_check.py"])
def test_a_check_given_a_missing_records_file_says_so_and_exits_2(tmp_path, script):
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--records", str(tmp_path / "none.jsonl")],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: --records ") and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
