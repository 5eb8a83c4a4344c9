"""Faults of the MLflow store and its folder, each one line with a documented exit status: a file-size limit while the
store is built."""

import os
import resource
import subprocess
import sys

import pytest

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1", "models=[cnn_9x9]",
       "data.test_subset=100"]


def limited(kilobytes: int):
    """A child's file-size limit (`ulimit -f`), its hard limit kept."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (kilobytes * 1024, resource.getrlimit(
        resource.RLIMIT_FSIZE)[1]))


@pytest.mark.slow
def test_a_file_size_limit_while_the_store_is_built_is_one_line(tmp_path, mnist_root):
    """SQLite says only "disk I/O error": with a file-size limit in force, that is the limit, said so; no half-built
    store is left, and the same command with the limit raised needs no repair."""
    out = tmp_path / "out"
    args = [sys.executable, "-m", "capsbench", *RUN, f"data.root={mnist_root}", f"output_dir={out}", "-q"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, preexec_fn=limited(200),  # noqa: PLW1509
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: no room to write {out / 'mlflow.db'}: this process may write files of at "
                                  "most 200.0 kB (ulimit -f) ("), done.stderr
    assert done.stderr.count("\n") == 1 and "raise the limit (ulimit -f unlimited)" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["mlflow.db.lock"]
