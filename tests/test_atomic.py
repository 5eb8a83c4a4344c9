"""Atomic writes create files with the user's umask (not mkstemp's 0600) and leave nothing behind on failure."""

import os
import stat

import pytest

from capsbench.util.atomic import atomic_file, write_text


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    text = tmp_path / "table.md"
    write_text(text, "| a |\n")
    with atomic_file(tmp_path / "model.ckpt", "wb") as fh:
        fh.write(b"\x00" * 10)
    assert _mode(text) == expected and _mode(tmp_path / "model.ckpt") == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt", "table.md"]


def test_checkpoints_and_figures_follow_the_umask(tmp_path, umask):
    import matplotlib.pyplot as plt
    import torch

    from capsbench.reporting.figures import save_figure
    from capsbench.util.atomic import save_torch

    umask(0o022)
    save_torch({"w": torch.ones(2)}, tmp_path / "k.ckpt")
    fig, _ = plt.subplots()
    paths = save_figure(fig, tmp_path / "plot")
    assert [_mode(p) for p in [tmp_path / "k.ckpt", *paths]] == [0o644, 0o644, 0o644]


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "records.csv"
    write_text(path, "old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as fh:
            fh.write("half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["records.csv"]
