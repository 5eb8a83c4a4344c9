"""Content-addressed checkpoint cache with atomic writes: a file is either complete or absent. A file that cannot
be read (truncated, garbage), or whose weights do not fit the model it is keyed for (missing or unexpected keys, other
shapes), is moved aside and reported, never loaded; each checkpoint has a JSON sidecar describing it, so the cache can
be listed without torch."""

from __future__ import annotations

import json
import logging
import pickle
import warnings
import zipfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from capsbench.util.atomic import save_torch, write_text
from capsbench.util.folders import checkpoint_file, partial_progress_file

log = logging.getLogger(__name__)

# What torch.load(weights_only=True) raises on truncated or garbage files (seen by fuzzing torch 2.x; OSError EINVAL
# from its zip reader for a file cut to some lengths). A file this process may not read is not among them: it is
# reported as it is, never moved aside.
UNREADABLE = (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, IndexError, KeyError, OSError)
ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of every file torch.save writes
FINISHED_KEYS = ("state_dict", "meta")
PARTIAL_KEYS = ("model", "optimizer", "scheduler", "epoch", "history", "best_val_accuracy", "best_epoch", "best_state")


def utc_stamp() -> str:
    """The current UTC time as 20261124T093000Z, for names of moved-aside files."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def sidecar(meta: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    """The sidecar of a finished checkpoint: its key's inputs and results, and the file it describes (size, mtime)."""
    stat = path.stat()
    return {
        "key": key, "file": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
        "created": datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(timespec="seconds"),
        "identity": meta.get("identity"), "source_files": meta.get("source_files"),
        "best_val_accuracy": meta.get("best_val_accuracy"), "best_epoch": meta.get("best_epoch"),
        "train_seconds": meta.get("train_seconds"),
    }


class CheckpointCache:
    """Finished checkpoints at <dir>/<key>.ckpt (described by <key>.json) and resumable training state at
    <dir>/<key>.partial.ckpt."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return checkpoint_file(self.directory, key)

    def partial_path(self, key: str) -> Path:
        return self.directory / f"{key}.partial.ckpt"

    def sidecar_path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str, expected: Mapping[str, torch.Tensor] | None = None) -> dict[str, Any] | None:
        """The finished checkpoint, or None when absent, unreadable, or (given the model's own state dict `expected`)
        of weights that do not fit the model; such a file is moved aside. Writes a missing sidecar."""
        payload = self._load(self.path(key), FINISHED_KEYS, "training again", "state_dict", expected)
        if payload is None:
            self.sidecar_path(key).unlink(missing_ok=True)
        elif not self.sidecar_path(key).exists():
            self._write_sidecar(key, payload["meta"])
        return payload

    def load_partial(self, key: str, expected: Mapping[str, torch.Tensor] | None = None) -> dict[str, Any] | None:
        """Resumable training state, or None (moved aside when unreadable or not fitting the model, as load)."""
        payload = self._load(self.partial_path(key), PARTIAL_KEYS, "training from the first epoch", "model", expected)
        if payload is None:
            partial_progress_file(self.directory, key).unlink(missing_ok=True)
        return payload

    def save(self, key: str, payload: dict[str, Any]) -> Path:
        """Cache a finished checkpoint (never one whose weights are not finite: a ValueError names the tensors)."""
        if bad := non_finite(payload["state_dict"]):
            raise ValueError(f"refusing to cache checkpoint {key}: its weights are not finite ({_some(bad)})")
        save_torch(payload, self.path(key))
        self._write_sidecar(key, payload["meta"])
        self._drop_partial(key)
        return self.path(key)

    def save_partial(self, key: str, payload: dict[str, Any]) -> None:
        """Keep the training state after an epoch, and the count of epochs it holds for the cost model."""
        save_torch(payload, self.partial_path(key))
        write_text(partial_progress_file(self.directory, key), json.dumps({"epochs_done": payload["epoch"] + 1}))

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
        self.sidecar_path(key).unlink(missing_ok=True)
        self._drop_partial(key)

    def _drop_partial(self, key: str) -> None:
        self.partial_path(key).unlink(missing_ok=True)
        partial_progress_file(self.directory, key).unlink(missing_ok=True)

    def _write_sidecar(self, key: str, meta: dict[str, Any]) -> None:
        write_text(
            self.sidecar_path(key), json.dumps(sidecar(meta, key, self.path(key)), indent=1, default=list) + "\n"
        )

    @staticmethod
    def _load(path: Path, required: tuple[str, ...], then: str, weights: str,
              expected: Mapping[str, torch.Tensor] | None) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Detected pickle protocol")  # garbage reads as any protocol
                payload = torch.load(path, map_location="cpu", weights_only=True)
        except PermissionError:
            raise
        except UNREADABLE as exc:
            _quarantine(path, _unreadable(path, exc), then)
            return None
        missing = [k for k in required if k not in payload] if isinstance(payload, dict) else list(required)
        if missing:
            _quarantine(path, f"it lacks {', '.join(missing)}", then)
            return None
        misfit = None if expected is None else state_mismatch(expected, payload[weights])
        if misfit is not None:
            _quarantine(path, f"its weights do not fit the model: {misfit}", then)
            return None
        if bad := non_finite(payload[weights]):
            _quarantine(path, f"its weights are not finite ({_some(bad)})", then)
            return None
        return payload


def _unreadable(path: Path, exc: BaseException) -> str:
    """Why torch.load failed, in words: no zip archive at all (torch.save writes one), an archive cut short or
    damaged, objects a weights-only load refuses, else torch's own first line."""
    with path.open("rb") as fh:
        head = fh.read(4)
    if head != ZIP_MAGIC:
        return "it is no torch checkpoint (not the zip archive torch.save writes: damaged, or another kind of file)"
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        return f"it was cut short or damaged (its zip archive of {path.stat().st_size:,} bytes cannot be read)"
    if damaged is not None:
        return f"it is damaged (its record {damaged} fails its CRC)"
    if "weights_only" in str(exc):
        return "it holds objects a weights-only load refuses"
    first = (str(exc) or "unexpected end of file").splitlines()[0].split(". ")[0][:160]
    return f"{type(exc).__name__}: {first}"


def non_finite(state: Mapping[str, Any]) -> list[str]:
    """The floating-point tensors of a state dict holding NaN or infinity, by name."""
    return [k for k, v in state.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not torch.isfinite(v).all()]


def state_mismatch(expected: Mapping[str, torch.Tensor], found: Any) -> str | None:
    """Why the state dict `found` cannot be loaded strictly into a model whose own state dict is `expected` (keys
    missing or unexpected, tensors of other shapes), or None when it fits: the checks load_state_dict(strict=True)
    makes, told before loading instead of as its RuntimeError."""
    if not isinstance(found, Mapping):
        return f"it holds a {type(found).__name__}, not a state dict"
    problems = []
    if missing := [k for k in expected if k not in found]:
        problems.append(f"missing {_some(missing)}")
    if unexpected := [k for k in found if k not in expected]:
        problems.append(f"unexpected {_some(unexpected)}")
    shapes = [f"{k} {_shape(found[k])} instead of {_shape(v)}" for k, v in expected.items()
              if k in found and _shape(found[k]) != _shape(v)]
    if shapes:
        problems.append(f"shape {_some(shapes)}")
    return "; ".join(problems) or None


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"


def _some(items: list[str], shown: int = 3) -> str:
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _quarantine(path: Path, reason: str, then: str) -> None:
    """Move an unreadable checkpoint to <name>.corrupt-<UTC time> (kept for inspection) and say so once."""
    aside = path.with_name(f"{path.name}.corrupt-{utc_stamp()}")
    path.replace(aside)
    log.warning("checkpoint %s cannot be used (%s); moved it to %s, %s", path, reason, aside, then)
