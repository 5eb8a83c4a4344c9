"""Standard output that cannot be written once the work is done: a reader that went away (`| head -1`) exits 141, as
SIGPIPE would, and a full one (`> /dev/full`) exits 3; either with one line on stderr, nothing lost."""

import os
import re
import subprocess
import sys

import pytest

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1", "models=[cnn_9x9]",
       "data.test_subset=100"]


def capsbench(*args: str, stdout, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capsbench", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=cwd, timeout=600)


def closed_pipe() -> int:
    """The write end of a pipe whose reader is gone: every write to it fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    return write


def one_line(stderr: str, said: str) -> None:
    lines = [line for line in stderr.splitlines() if not re.match(r"\d\d:\d\d:\d\d ", line)]  # no log lines
    assert lines == [lines[0]] and lines[0].startswith(f"error: standard output cannot be written: {said}"), stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


@pytest.mark.parametrize("target, status, said", [
    ("pipe", 141, "its reader closed it (broken pipe)"), ("/dev/full", 3, "No space left on device")])
def test_list_into_a_closed_pipe_or_a_full_device_is_one_line(tmp_path, target, status, said):
    out = closed_pipe() if target == "pipe" else open(target, "w")  # noqa: SIM115 -- closed below
    try:
        done = capsbench("list", "models", stdout=out, cwd=tmp_path)
    finally:
        os.close(out) if target == "pipe" else out.close()
    assert done.returncode == status
    one_line(done.stderr, said)


@pytest.mark.slow
def test_a_finished_run_whose_summary_cannot_be_printed_keeps_everything(tmp_path, mnist_root):
    """The run's tables, store and units are written before it prints; the same command finds its unit finished."""
    args = [*RUN, f"data.root={mnist_root}", f"output_dir={tmp_path / 'out'}"]
    with open("/dev/full", "w") as full:
        done = capsbench(*args, stdout=full, cwd=tmp_path)
    assert done.returncode == 3
    one_line(done.stderr, "No space left on device")
    assert (tmp_path / "out" / "accuracy" / "table.md").is_file()
    again = capsbench(*args, stdout=subprocess.PIPE, cwd=tmp_path)
    assert again.returncode == 0 and "1 finished by an earlier run of this command" in again.stderr, again.stderr
