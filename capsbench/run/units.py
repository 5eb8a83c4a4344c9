"""The unit of work: one suite x model x variant x seed as a small, typed, JSON-able spec that any launcher can run in
any process, the events it sends while it runs, and the result it hands back. Nothing here imports torch."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from capsbench.errors import is_no_space
from capsbench.models.failures import describe, user_frame
from capsbench.util.hashing import package_hash
from capsbench.util.version import __version__

# The unit's own settings: everything a unit reads, nothing about where the driver logs or how it launches.
UNIT_KEYS = ("suite", "budget", "dataset", "device", "threads", "cache_dir", "output_dir", "retrain", "data", "train",
             "params")
# Settings that say where files are, not what is measured: they do not enter a unit's key.
NOT_IN_KEY = ("cache_dir", "output_dir", "retrain")
NOT_IN_KEY_DATA = ("root", "download")


@dataclass(frozen=True)
class UnitSpec:
    """What one unit measures: a suite on one model (with its constructor arguments), one variant, one seed.

    config holds the unit's settings (UNIT_KEYS), resolved by the planner: model_args for this model and variant,
    and train with the model's own settings (model_train.<model>) merged in. Nothing downstream resolves them again.
    """

    suite: str
    model: str
    seed: int
    variant: dict[str, Any] = field(default_factory=dict)  # record columns naming the variant, e.g. {"r": 3}
    config: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None  # the key of the checkpoint it trains or reuses (the planner's); None: trains none

    @property
    def dataset(self) -> str:
        return self.config["dataset"]

    @property
    def name(self) -> str:
        suffix = "".join(f"-{k}{v}" for k, v in self.variant.items())
        return f"{self.suite}/{self.model}{suffix}-{self.dataset}-s{self.seed}"

    @property
    def key(self) -> str:
        """A hash of everything that determines the unit's records: its settings, capsbench's version and code."""
        settings = {k: v for k, v in self.config.items() if k not in NOT_IN_KEY}
        settings["data"] = {k: v for k, v in settings["data"].items() if k not in NOT_IN_KEY_DATA}
        if "weights" in settings:  # external weights: by content (sha256), wherever the file lies
            settings["weights"] = {k: v for k, v in settings["weights"].items() if k != "path"}
        blob = json.dumps({"suite": self.suite, "model": self.model, "seed": self.seed, "variant": self.variant,
                           "settings": settings, "capsbench": __version__, "code": package_hash()},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnitSpec:
        return cls(**data)

    def run_config(self) -> DictConfig:
        """The unit's settings as the config object the library's training and suite code reads."""
        return OmegaConf.create(self.config)


@dataclass
class UnitResult:
    """What a unit hands back to the driver, JSON-able: its records, what to log about it, and how it went.

    status: "done", or "failed" with `error` (the exception's type and message) and no records; `rerun_helps` says
    whether running it again may succeed (a passing fault) or repeats the error (a bug or a bad setting).
    params / metrics / curves: for its MLflow run (checkpoint and model arguments; best validation accuracy;
    per-epoch training history with epoch, train_loss, train_accuracy, val_accuracy, lr).
    figures: paths of the figure files it wrote under output_dir.
    """

    key: str
    spec: UnitSpec
    status: str
    records: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    curves: list[dict[str, float]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    train_seconds: float = 0.0  # of `seconds`, training its checkpoint (0: from the cache, or nothing to train)
    host: str = ""
    rerun_helps: bool = False
    machine: dict[str, str] = field(default_factory=dict)  # the machine.* tags of the host that ran it

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "spec": self.spec.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnitResult:
        return cls(**{**data, "spec": UnitSpec.from_dict(data["spec"])})


# Failures that may pass when the unit runs again: memory taken by another job, a lost worker, node or connection,
# a scheduler's time limit (matched by class name across the exception's bases, without importing torch or Ray).
PASSING = frozenset({"MemoryError", "OutOfMemoryError", "ConnectionError", "TimeoutError", "WorkerCrashedError",
                     "NodeDiedError", "ObjectLostError", "LocalRayletDiedError", "UncompletedJobError"})


def rerun_may_help(exc: BaseException) -> bool:
    """Whether a unit that raised `exc` may succeed when run again: a passing fault, or a full disk once space is
    freed. A bad argument value, a shape error or any other bug repeats: False."""
    return is_no_space(exc) or any(cls.__name__ in PASSING for cls in type(exc).__mro__)


def failed(spec: UnitSpec, exc: BaseException) -> UnitResult:
    """The result of a unit that raised: no records, the exception's type and message (first line) as the error, and
    the file and line in an external model's own code when the exception came from there."""
    module = (spec.config.get("external") or {}).get("target", "").partition(":")[0]
    where = user_frame(exc, module) if module else None
    return UnitResult(key=spec.key, spec=spec, status="failed", error=describe(exc) + (where or ""),
                      rerun_helps=rerun_may_help(exc))


@dataclass(frozen=True)
class UnitEvent:
    """Something a unit says while it runs, for the driver to log at once: "started" (data: {}), "epoch" (data: a
    training history row: epoch, train_loss, train_accuracy, val_accuracy, lr) or "measured" (data: {"passes": the
    image passes of its declared measuring done so far}). JSON-able, so that Ray and SLURM
    workers send it back as it happens."""

    key: str  # the unit's key
    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)  # seconds since the epoch, on the worker's clock
    host: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnitEvent:
        return cls(**data)
