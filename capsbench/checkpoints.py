"""Content-addressed checkpoint cache with atomic writes: a file is either complete or absent."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from capsbench.atomic import atomic_file


def content_key(identity: dict[str, Any]) -> str:
    """A stable hash of everything that changes the trained weights."""
    blob = json.dumps(identity, sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save that leaves either the complete file or none (see capsbench.atomic)."""
    with atomic_file(path, "wb") as fh:
        torch.save(obj, fh)


class CheckpointCache:
    """Finished checkpoints at <dir>/<key>.ckpt and resumable training state at <dir>/<key>.partial.ckpt."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.ckpt"

    def partial_path(self, key: str) -> Path:
        return self.directory / f"{key}.partial.ckpt"

    def load(self, key: str) -> dict[str, Any] | None:
        return self._load(self.path(key))

    def load_partial(self, key: str) -> dict[str, Any] | None:
        return self._load(self.partial_path(key))

    def save(self, key: str, payload: dict[str, Any]) -> Path:
        atomic_save(payload, self.path(key))
        self.partial_path(key).unlink(missing_ok=True)
        return self.path(key)

    def save_partial(self, key: str, payload: dict[str, Any]) -> None:
        atomic_save(payload, self.partial_path(key))

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
        self.partial_path(key).unlink(missing_ok=True)

    @staticmethod
    def _load(path: Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        return torch.load(path, map_location="cpu", weights_only=True)
