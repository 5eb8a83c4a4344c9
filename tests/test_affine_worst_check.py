"""The held-out check of the worst-case affine grid, run as a user runs it: `capsbench run suite=affine` on a small CNN
trained on real MNIST, then benchmarks/affine_worst_check.py on its records. A plain loop with the sweeps' warp must
find the suite's worst case digit for digit on the same grid, and its finer grid may leave no digit right that the
suite's grid breaks."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capsbench.cli import app

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "affine_worst_check.py"
LINE = re.compile(r"^affine_worst cnn_sabour s0 suite=(\S+) coarse=(\S+) fine=(\S+) disagree=(\d+) "
                  r"finer_not_above=(yes|no)$", re.MULTILINE)


@pytest.mark.slow
def test_a_plain_loop_finds_the_suites_worst_case_and_a_finer_grid_breaks_no_fewer(tmp_path, mnist_root):
    # threads named: a checkpoint's key holds the threads that trained it, and without threads= that is the process's
    # torch setting, which earlier tests in this process may have changed (the script runs in a fresh one)
    settings = ["budget=smoke", "params.worst_images=300", f"output_dir={tmp_path}", f"data.root={mnist_root}",
                "data.download=false", "device=cpu", "threads=1", f"cache_dir={tmp_path / 'ckpt'}"]
    result = CliRunner().invoke(app, ["run", "suite=affine", "models=[cnn_sabour]", "tracking.enabled=false",
                                      "--quiet", *settings])
    assert result.exit_code == 0, result.output
    records = tmp_path / "affine" / "records.jsonl"
    done = subprocess.run([sys.executable, str(SCRIPT), "--records", str(records), "--set", *settings],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [(suite, coarse, fine, disagree, finer_not_above)] = LINE.findall(done.stdout)
    assert disagree == "0" and suite == coarse, done.stdout
    assert finer_not_above == "yes" and float(fine) <= float(coarse), done.stdout
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    clean = next(r["value"] for r in rows if r["metric"] == "grid_clean_accuracy")
    assert 0 < float(fine) and float(suite) < clean, "the check needs digits the grid breaks and digits it leaves"
