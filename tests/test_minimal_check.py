"""The held-out check of each image's smallest perturbation, run as a user runs it: `capsbench run
suite=robustness_l2 params.minimal=[fmn,fab]` on a small CNN trained on real MNIST, then benchmarks/minimal_check.py on
its records. Carlini and Wagner's L2 attack (foolbox's, a binary search over c), which the suite does not use, may
find a clearly smaller perturbation than the suite's on few images at most."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capsbench.cli import app

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "minimal_check.py"
LINE = re.compile(r"^minimal_check cnn_sabour s0 suite=(\S+) cw=(\S+) cw_found=(\d+) cw_smaller=(\d+) n=(\d+)$",
                  re.MULTILINE)


@pytest.mark.slow
def test_a_held_out_minimum_norm_attack_finds_no_smaller_perturbations_than_the_suite(tmp_path, mnist_root):
    # threads named: a checkpoint's key holds the threads that trained it, and without threads= that is the process's
    # torch setting, which earlier tests in this process may have changed (the script runs in a fresh one)
    settings = ["budget=smoke", "data.test_subset=60", f"output_dir={tmp_path}", f"data.root={mnist_root}",
                "data.download=false", "device=cpu", "threads=1", f"cache_dir={tmp_path / 'ckpt'}"]
    minimal = ["params.minimal=[fmn,fab]", "params.attack_args.fmn.steps=100", "params.attack_args.fab.steps=30"]
    result = CliRunner().invoke(app, ["run", "suite=robustness_l2", "models=[cnn_sabour]", *minimal,  # quick's steps
                                      "tracking.enabled=false", "--quiet", *settings])
    assert result.exit_code == 0, result.output
    records = tmp_path / "robustness_l2" / "records.jsonl"
    cw = ["--steps", "100", "--lr", "0.1", "--search", "3"]
    done = subprocess.run([sys.executable, str(SCRIPT), "--records", str(records), *cw, "--set", *settings],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [(suite, cw, found, smaller, n)] = LINE.findall(done.stdout)
    assert int(n) == 60 and 0 < float(suite) < float("inf"), done.stdout
    assert int(found) >= 48, done.stdout  # CW breaks most images: the comparison below has something to compare
    assert int(smaller) <= 3, done.stdout  # 5 % of the images: CW found a clearly smaller perturbation there
    assert "| cnn_sabour | 0 | 60 |" in done.stdout
