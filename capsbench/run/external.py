"""External models and external weights in a run's units: what a unit's config carries about them (the alias's target
and the hash of its source; the weights file and its SHA-256), the alias registered again in a worker process, and the
lines under the tables that name each external weights file."""

from __future__ import annotations

import functools
import logging
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from capsbench.errors import CapsbenchError
from capsbench.models import MODELS
from capsbench.models.external import external_spec, register_alias
from capsbench.util.hashing import file_sha256

log = logging.getLogger(__name__)
EXTERNAL = "external"  # the `training` column of a model measured with weights trained elsewhere
WEIGHTS_COLUMN = "weights_sha256"  # the record column holding the SHA-256 of those weights
CODE_TAG = "code.model."  # + alias: the run tag of an external model's source hash (read by capsbench report)


def external_settings(cfg: DictConfig, model: str) -> dict[str, Any]:
    """The unit-config entries of `model`: "external" for a model from outside the package (its target, where it was
    registered, and its source hash, so that editing the user's code changes the unit's key), "weights" when it is
    measured with weights trained elsewhere ({"path", "sha256" of the file, "tensors_sha256" of the tensors it holds,
    which names the weights in the records; the path is not part of the key)."""
    settings: dict[str, Any] = {}
    spec = external_spec(model)
    if spec is not None:
        source = spec.source_hash()
        if source is None:
            log.warning("%s: the source of %s cannot be read (defined in a notebook?); its units are measured again "
                        "on every call", model, spec.target)
            source = f"unreadable-{uuid.uuid4().hex}"
        settings["external"] = {"target": spec.target, "origin": spec.origin, "source": source}
        if spec.instance is not None:
            settings["weights"] = {"path": None, "sha256": spec.state_sha256}
    path = (cfg.get("weights") or {}).get(model)
    if path is not None:
        settings["weights"] = {"path": str(path), "sha256": weights_sha256(str(path)),
                               "tensors_sha256": weights_tensors_sha256(str(path))}
    return settings


def weights_sha256(path: str) -> str:
    """The file's SHA-256, read once per process for each version (size, modification time) of the file."""
    stat = Path(path).stat()
    return _sha256(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(Path(path))


def weights_tensors_sha256(path: str) -> str:
    """The SHA-256 of the tensors the weights file holds (capsbench.models.weights.tensors_sha256), read once per
    process for each version of the file: a module given to capsbench.evaluate and the file its state dict was saved
    to are the same weights."""
    stat = Path(path).stat()
    return _tensors(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _tensors(path: str, mtime_ns: int, size: int) -> str:
    from capsbench.models.weights import read_state_dict, tensors_sha256  # lazy: torch, only for a weights file

    return tensors_sha256(read_state_dict(Path(path), f"weights file {path}"))


def ensure_registered(model: str, config: dict[str, Any]) -> None:
    """In the process that runs a unit: register its external model when this process does not know it (a Ray or
    SLURM worker), and check that the worker reads the same source as the driver did."""
    info = config.get("external")
    if not info:
        return
    spec = external_spec(model) if model in MODELS else None
    if info["origin"] == "instance":
        if spec is None or spec.instance is None:
            raise CapsbenchError(
                f"model {model!r} is an instance held by the driver's process: run it with launcher=local"
            )
        return
    if spec is None or spec.target != info["target"]:
        spec = register_alias(model, info["target"], f"model {model!r} ({info['target']})")
    if not info["source"].startswith("unreadable-") and spec.source_hash() != info["source"]:
        raise CapsbenchError(
            f"model {model!r}: {info['target']} in this process differs from the driver's; install the same code "
            "on every worker"
        )


def code_tags(units: list[Any]) -> dict[str, str]:
    """The source hash of every external model among the units (UnitSpecs), as run tags code.model.<alias>: the code
    identity of a model from outside the package, which `capsbench report` never mixes, as capsbench's own."""
    return {f"{CODE_TAG}{u.model}": u.config["external"]["source"] for u in units if "external" in u.config}


def weights_notes(records: list[dict[str, Any]]) -> list[str]:
    """One line per model measured with external weights, naming the file and its SHA-256."""
    seen = {(r["model"], r[WEIGHTS_COLUMN]) for r in records if r.get(WEIGHTS_COLUMN)}
    return [f"{model} (training={EXTERNAL}): weights sha256:{sha}" for model, sha in sorted(seen)]
