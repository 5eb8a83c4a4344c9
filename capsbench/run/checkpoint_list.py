"""`capsbench list checkpoints`: one row per finished checkpoint in the cache, read from the JSON sidecars (no torch);
a checkpoint without a current sidecar is read with torch.load(weights_only=True), and never modified."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from capsbench.config.request import Request
from capsbench.config.schema import RunConfig
from capsbench.errors import CapsbenchError
from capsbench.util.paths import resolved
from capsbench.util.registry import close_matches

KEYS = ("cache_dir", "output_dir")
NUMBER = (int, float)
# What row() reads of a sidecar, by path, and the type sidecar() writes there (or None)
SIDECAR_FIELDS = {
    ("key",): str, ("created",): str, ("best_val_accuracy",): NUMBER, ("best_epoch",): int,
    ("identity", "model"): str, ("identity", "seed"): int, ("identity", "torch"): str, ("identity", "capsbench"): str,
    ("identity", "train", "epochs"): int, ("identity", "train", "batch_size"): int, ("identity", "train", "lr"): NUMBER,
    ("identity", "train", "lr_decay"): NUMBER, ("identity", "train", "target_val_accuracy"): NUMBER,
    ("identity", "data", "dataset"): str, ("identity", "data", "train_subset"): int,
    ("identity", "source", "hash"): str,
}
COLUMNS = ("key", "model", "dataset", "seed", "epochs", "batch", "lr", "decay", "train_n", "source", "torch",
           "val_acc", "created", "size")


def cache_directory(request: Request) -> Path:
    """cache_dir=, else $CAPSBENCH_CACHE, else <output_dir>/checkpoints: the directory `capsbench run` would use."""
    for key in request.line:
        if key not in KEYS:
            raise CapsbenchError(
                f"unknown key {key!r} for `capsbench list checkpoints`: {close_matches(key, list(KEYS))}"
            )
    raw = {**{k: v for k, v in request.file.items() if k in KEYS}, **request.line}  # config=FILE may name them
    chosen = str(raw["cache_dir"]) if raw.get("cache_dir") else os.environ.get("CAPSBENCH_CACHE")
    if not chosen:
        chosen = str(Path(raw.get("output_dir") or RunConfig.output_dir) / "checkpoints")
    directory = resolved(chosen, "cache_dir")
    if directory.exists() and not directory.is_dir():
        raise CapsbenchError(f"cache_dir {directory} is no directory: point cache_dir= (or CAPSBENCH_CACHE) at the "
                             "folder your runs keep their checkpoints in")
    return directory


def _from_checkpoint(path: Path) -> dict[str, Any]:
    """The sidecar's content rebuilt from the checkpoint itself (older checkpoints, or an interrupted sidecar write)."""
    import torch  # here: listing reads sidecars without torch; only a checkpoint without one needs it

    from capsbench.train.checkpoints import UNREADABLE  # with torch, for the same reason

    stat = path.stat()
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        meta = payload["meta"]
    except (*UNREADABLE, TypeError):  # TypeError: a readable file that is not a checkpoint's dict
        meta = {"unreadable": True}
    return {
        "key": path.stem,
        "size": stat.st_size,
        "created": datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(timespec="seconds"),
        "identity": meta.get("identity"),
        "best_val_accuracy": meta.get("best_val_accuracy"),
        "best_epoch": meta.get("best_epoch"),
        "unreadable": meta.get("unreadable", False),
    }


def _described(path: Path) -> dict[str, Any]:
    side = path.with_suffix(".json")
    stat = path.stat()
    if side.exists():
        try:
            info = json.loads(side.read_text())
        except json.JSONDecodeError:
            info = None
        if _current(info, stat):
            return info
    return _from_checkpoint(path)


def _current(info: Any, stat: os.stat_result) -> bool:
    """Whether a sidecar describes the checkpoint beside it as it is now, in the sidecar's own shape (one edited by
    hand or by another program is read from the checkpoint instead)."""
    if not (isinstance(info, dict) and info.get("size") == stat.st_size and info.get("mtime_ns") == stat.st_mtime_ns):
        return False
    for path, kind in SIDECAR_FIELDS.items():
        node: Any = info
        for part in path:
            node = node.get(part)
            if node is None:
                break
            if part != path[-1] and not isinstance(node, dict):
                return False
        if node is not None and (not isinstance(node, kind) or isinstance(node, bool)):
            return False
    return True


def row(info: dict[str, Any], path: Path) -> dict[str, Any]:
    """A flat, JSON-ready description of one checkpoint."""
    ident = info.get("identity") or {}
    train, data, source = ident.get("train") or {}, ident.get("data") or {}, ident.get("source") or {}
    acc = info.get("best_val_accuracy")
    return {
        "key": info.get("key", path.stem),
        "model": ident.get("model"),
        "dataset": data.get("dataset"),
        "seed": ident.get("seed"),
        "epochs": train.get("epochs"),
        "batch_size": train.get("batch_size"),
        "lr": train.get("lr"),
        "lr_decay": train.get("lr_decay"),
        "train_subset": data.get("train_subset"),
        "target_val_accuracy": train.get("target_val_accuracy"),
        "source_hash": source.get("hash"),
        "torch": ident.get("torch"),
        "capsbench": ident.get("capsbench"),
        "best_val_accuracy": None if acc is None else 100.0 * acc,
        "best_epoch": info.get("best_epoch"),
        "created": info.get("created"),
        "size": path.stat().st_size,
        "path": str(path),
        "readable": not info.get("unreadable", False),
    }


def list_checkpoints(directory: Path) -> list[dict[str, Any]]:
    """Every finished checkpoint under `directory`, oldest first (partial and moved-aside files are not listed)."""
    if not directory.is_dir():
        return []
    paths = [p for p in directory.glob("*.ckpt") if not p.name.endswith(".partial.ckpt")]
    rows = [row(_described(p), p) for p in paths]
    return sorted(rows, key=lambda r: (r["created"] or "", r["key"]))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def text_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A header and one aligned line per checkpoint."""

    def cell(value: Any, fmt: str = "{}") -> str:
        return "-" if value is None else fmt.format(value)

    table = [COLUMNS] + [
        (
            r["key"],
            cell(r["model"]),
            cell(r["dataset"]),
            cell(r["seed"]),
            cell(r["epochs"]),
            cell(r["batch_size"]),
            cell(r["lr"], "{:g}"),
            cell(r["lr_decay"], "{:g}"),
            cell(r["train_subset"] or ("all" if r["epochs"] else None)),
            cell(r["source_hash"] and r["source_hash"][:10]),
            cell(r["torch"]),
            cell(r["best_val_accuracy"], "{:.2f}") if r["readable"] else "unreadable",
            cell(r["created"] and r["created"].replace("+00:00", "Z")),
            _size(r["size"]),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table]
