"""What a suite is: declared metrics, typed parameters, and a measure() that returns tidy records."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from matplotlib.figure import Figure

from capsbench.data import Splits
from capsbench.models import Classifier
from capsbench.plots import SweepPlot
from capsbench.protocols import TrainingProtocol, dataset_protocol

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_\-. /]+$")  # what MLflow accepts in a metric name


@dataclass(frozen=True)
class Metric:
    """A metric a suite reports: its MLflow-safe name, unit, and which direction is better."""

    name: str
    unit: str
    higher_is_better: bool
    description: str = ""

    def __post_init__(self) -> None:
        if not _SAFE_NAME.match(self.name):
            raise ValueError(f"metric name {self.name!r} must use only letters, digits, '_', '-', '.', '/', ' '")


@dataclass
class Context:
    """Everything a suite needs to measure one trained model; suites never write files or log."""

    model: Classifier
    model_name: str
    splits: Splits
    params: Any
    device: str
    batch_size: int
    seed: int
    protocol: TrainingProtocol


@dataclass
class NoParams:
    """Suites without parameters of their own."""


class Suite:
    """Base class. Subclasses set the class attributes and write measure()."""

    name: ClassVar[str]
    description: ClassVar[str]
    metrics: ClassVar[tuple[Metric, ...]]
    sweep_columns: ClassVar[tuple[str, ...]] = ()  # record columns such as eps or angle
    plots: ClassVar[tuple[SweepPlot, ...]] = ()  # drawn from the records by the report layer
    Params: ClassVar[type] = NoParams

    def protocol(self, cfg: Any) -> TrainingProtocol:
        """How this suite's models are trained; the default is the dataset's (Sabour's random shifts, or crops)."""
        return dataset_protocol(cfg.dataset, cfg.data.max_shift)

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        """Records {"metric": name, "value": float, <sweep column>: value, ...} for one model."""
        raise NotImplementedError

    def figures(self, ctx: Context) -> dict[str, Figure]:
        """Per-model figures that records cannot express (e.g. example images); written by the runner."""
        return {}

    @classmethod
    def metric(cls, name: str) -> Metric:
        for m in cls.metrics:
            if m.name == name:
                return m
        raise KeyError(f"suite {cls.name!r} declares no metric {name!r}")
