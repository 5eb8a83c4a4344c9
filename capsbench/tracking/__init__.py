"""MLflow, and only here: the driver's writer (parent and nested runs), the store (lock, experiment, stale runs) and
the reader behind `capsbench report`. Suites and units never log; the driver logs what they return."""

from __future__ import annotations

from typing import Any

from capsbench.tracking.environment import environment_tags, git_state, process_tags
from capsbench.tracking.metrics import metric_key
from capsbench.tracking.reader import (
    UNTAGGED,
    Invocation,
    UnreadableRecords,
    download_checkpoint,
    read_config,
    read_invocations,
    read_records,
    untabulated_runs,
)
from capsbench.tracking.store import check_store, ensure_store, open_experiment, recover_stale_runs, store_lock
from capsbench.tracking.writer import Tracker, now_ms


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists become their string form."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            flat.update(flatten(v, key))
        else:
            flat[key] = v
    return flat


__all__ = [
    "UNTAGGED", "Invocation", "Tracker", "UnreadableRecords", "check_store", "download_checkpoint", "ensure_store",
    "environment_tags", "flatten", "git_state", "metric_key", "now_ms", "open_experiment", "process_tags",
    "read_config", "read_invocations", "read_records", "recover_stale_runs", "store_lock",
    "untabulated_runs",
]
