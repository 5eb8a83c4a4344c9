"""The checkpoint cache under two faults a shared machine meets: two runs training the same checkpoint into one cache
at once, and a process killed (SIGKILL) while it writes a finished checkpoint, then the same command again."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capsbench.train.checkpoints import CheckpointCache

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=2", "models=[cnn_9x9]",
       "data.train_subset=600", "data.val_subset=200", "data.test_subset=200", "tracking.enabled=false"]

# The CLI, with the write of every finished checkpoint cut off: some bytes reach the temporary file, then SIGKILL.
KILLED_WHILE_WRITING = """
import contextlib, os, signal, sys
import capsbench.util.atomic as atomic
real = atomic.atomic_file

@contextlib.contextmanager
def cut_off(path, mode="w", size=None):
    with real(path, mode, size) as fh:
        if path.name.endswith(".ckpt") and not path.name.endswith(".partial.ckpt"):
            fh.write(b"PK" * 4096)
            fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        yield fh

atomic.atomic_file = cut_off
from capsbench.cli import app
app(sys.argv[1:])
"""


def _run(*args: str, script: list[str] | None = None) -> subprocess.Popen:
    command = [sys.executable, *(script or ["-m", "capsbench"]), *RUN, *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _accuracy(out: Path) -> float:
    (record,) = [r for r in map(json.loads, (out / "accuracy" / "records.jsonl").read_text().splitlines())
                 if r["metric"] == "test_accuracy"]
    return record["value"]


def _finished(cache: Path) -> list[Path]:
    return [p for p in cache.glob("*.ckpt") if not p.name.endswith(".partial.ckpt")]


@pytest.mark.slow
def test_two_runs_training_the_same_checkpoint_at_once_agree_and_leave_one_whole_checkpoint(tmp_path, mnist_root):
    cache = tmp_path / "cache"
    runs = [_run(f"data.root={mnist_root}", f"output_dir={tmp_path / name}", f"cache_dir={cache}")
            for name in ("a", "b")]
    for run in runs:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert _accuracy(tmp_path / "a") == _accuracy(tmp_path / "b")
    (checkpoint,) = _finished(cache)
    assert not list(cache.glob("*.partial.ckpt")) and not list(cache.glob(".*.tmp"))
    assert CheckpointCache(cache).sidecar_path(checkpoint.stem).is_file()
    assert set(torch.load(checkpoint, weights_only=True)) >= {"state_dict", "meta"}


@pytest.mark.slow
def test_a_run_killed_while_writing_its_checkpoint_leaves_none_and_the_same_command_finishes(tmp_path, mnist_root):
    cache = tmp_path / "cache"
    args = (f"data.root={mnist_root}", f"output_dir={tmp_path / 'out'}", f"cache_dir={cache}")
    killed = _run(*args, script=["-c", KILLED_WHILE_WRITING])
    killed.communicate(timeout=600)
    assert killed.returncode == -9
    assert not _finished(cache)  # the cut-off file never took the checkpoint's name
    again = _run(*args)
    _, stderr = again.communicate(timeout=600)
    assert again.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    (checkpoint,) = _finished(cache)
    assert set(torch.load(checkpoint, weights_only=True)) >= {"state_dict", "meta"}
    assert _accuracy(tmp_path / "out") > 10.0
