"""Where a command writes its files: a folder of its own, <output_dir>/runs/<date>/<time>/ (as Hydra's
outputs/<date>/<time>/), never reused, so that no run replaces another's; then its folders are copied to
<output_dir>/<name>/, which thus holds the latest run's files at fixed paths (a copy replaces only the files the
previous copy put there). The checkpoint cache, the unit store and the MLflow store stay shared under output_dir."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

from capsbench.util.atomic import atomic_file, make_folder, write_text

RUNS = "runs"
CHECKPOINT_SUFFIX = ".ckpt"
COPIED = ".latest-files"  # in a latest folder: the files the last copy put there, one relative path a line


def new_run_folder(output_dir: str | Path, now: datetime | None = None) -> Path:
    """A new, empty folder <output_dir>/runs/<YYYY-MM-DD>/<HH-MM-SS> (UTC), with -2, -3, ... when a run started in the
    same second already has it."""
    now = now or datetime.now(timezone.utc)
    day = Path(output_dir) / RUNS / f"{now:%Y-%m-%d}"
    make_folder(day)
    stem, n = f"{now:%H-%M-%S}", 1
    while True:
        folder = day / (stem if n == 1 else f"{stem}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def run_stamp(folder: Path) -> str:
    """A run folder's name as one short, unique word: 20261121-143005 (or 20261121-143005-2)."""
    return f"{folder.parent.name.replace('-', '')}-{folder.name.replace('-', '', 2)}"


def publish_latest(source: Path, target: Path) -> dict[str, Path]:
    """Copy every file under `source` to the same place under `target`, and delete the files the previous copy put
    there that this one does not have (anything else in `target`, such as the unit store, is left alone). Returns the
    copies by their path relative to `target`."""
    names = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    listing = target / COPIED
    before = listing.read_text().splitlines() if listing.is_file() else []
    copies = {}
    for name in names:
        copies[name] = target / name
        with (source / name).open("rb") as src, atomic_file(copies[name], "wb") as dst:
            shutil.copyfileobj(src, dst)
    for name in set(before) - set(names):
        (target / name).unlink(missing_ok=True)
    write_text(listing, "".join(f"{name}\n" for name in names))
    return copies


def checkpoint_file(cache_dir: str | Path, key: str) -> Path:
    """Where the checkpoint cache keeps the finished checkpoint of `key` (capsbench.train.checkpoints)."""
    return Path(cache_dir) / f"{key}{CHECKPOINT_SUFFIX}"


def partial_progress_file(cache_dir: str | Path, key: str) -> Path:
    """Beside the resumable training state of `key`: {"epochs_done": N}, so that a plan prices only the epochs left
    without loading the state (capsbench.train.checkpoints writes it, capsbench.run.cost_model reads it)."""
    return Path(cache_dir) / f"{key}.partial.json"
