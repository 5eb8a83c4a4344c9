"""What a suite is: declared metrics, typed parameters, and a measure() that returns tidy records."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from matplotlib.figure import Figure

from capsbench.data import DATASETS, Splits
from capsbench.models import Classifier
from capsbench.suites.layout import Layout
from capsbench.suites.params import NoParams
from capsbench.train.protocols import TrainingProtocol, dataset_protocol

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_\-. /]+$")  # what MLflow accepts in a metric name


@dataclass(frozen=True)
class Metric:
    """A metric a suite reports: its MLflow-safe name, unit, and which direction is better.

    higher_is_better=None marks a descriptive number (a property of the data, not of a model): no best.
    exact=True marks a deterministic count (parameters, MACs): no noise, so a strict lead is significant.
    contains: metrics this one counts a superset of, per image, on the same model and images (correct or flagged
    contains correct): a claim that it beats one of them on the same model cannot fail, and is refused.
    """

    name: str
    unit: str
    higher_is_better: bool | None
    description: str = ""
    exact: bool = False
    contains: tuple[str, ...] = ()

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
    resources: Any = None  # what the suite's prepare() returned, shared by every model and seed
    model_args: dict[str, Any] = field(default_factory=dict)  # the constructor arguments the model was built with
    kept: dict[str, Any] = field(default_factory=dict)  # what measure() leaves for figures() of the same unit


@dataclass(frozen=True)
class Variant:
    """One entry of a suite's plan for a model: constructor overrides and the record columns that name it."""

    model_args: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] = field(default_factory=dict)


def test_images(cfg: Any) -> int:
    """How many test images a unit of config `cfg` reads (data.test_subset of the dataset's test split)."""
    size = DATASETS.get(cfg.dataset).test_size
    return min(size, cfg.data.test_subset or size)


class Suite:
    """Base class. Subclasses set the class attributes and write measure(); `name` and `Params` come from the suite's
    catalog entry (capsbench.suites.CATALOG) when the class is loaded."""

    name: ClassVar[str]
    description: ClassVar[str]
    metrics: ClassVar[tuple[Metric, ...]]
    sweep_columns: ClassVar[tuple[str, ...]] = ()  # record columns such as eps or angle
    detail_columns: ClassVar[tuple[str, ...]] = ()  # text columns kept in the records, never pivoted (e.g. a reason)
    layout: ClassVar[Layout | None] = None  # tables and figures drawn from the records; None: a column per metric
    Params: ClassVar[type] = NoParams
    needs_training: ClassVar[bool] = True  # False: the unit builds fresh models (seeded) at the budget's sizes
    test_model: ClassVar[str] = "cnn_9x9"  # a model the registry's tests measure it on at a tiny size

    def variants(self, cfg: Any, model_name: str) -> list[Variant]:
        """The variants of a model this suite measures (e.g. routing iterations r = 1..5); default: the model as
        configured."""
        return [Variant()]

    def protocol(self, cfg: Any) -> TrainingProtocol:
        """How this suite's models are trained; the default is the dataset's (Sabour's random shifts, or crops)."""
        return dataset_protocol(cfg.dataset, cfg.data.max_shift)

    def prepare(self, cfg: Any, splits: Splits) -> Any:
        """Suite-specific data built once per invocation (e.g. a generated test set; data-layer caches allowed)."""
        return None

    def work(self, cfg: Any) -> float:
        """What measuring one model costs, declared in image passes (forward or backward) before it runs: it weighs
        the units' progress and time left. Default: one pass over the test images."""
        return float(test_images(cfg))

    def work_kind(self, cfg: Any) -> str:
        """The name under which the measuring speed (declared passes per second) is learned and priced: the suite's,
        unless a setting changes how its declared passes relate to its time. Default: the suite's name."""
        return self.name

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        """Records {"metric": name, "value": float, <sweep column>: value, ...} for one model."""
        raise NotImplementedError

    def figures(self, ctx: Context) -> dict[str, Figure]:
        """Per-model figures that records cannot express (e.g. example images); written by the driver."""
        return {}

    def card_details(self, params: Any, dataset: str) -> dict[str, Any]:
        """What a model card should say of this suite's settings beyond the records (e.g. the threat model and each
        attack's budget); default: nothing."""
        return {}

    def notes(self, records: list[dict[str, Any]], params: Any) -> list[str]:
        """Footnotes printed under the tables (e.g. sanity checks that fired), from all records of the run."""
        return []

    @classmethod
    def metric(cls, name: str) -> Metric:
        for m in cls.metrics:
            if m.name == name:
                return m
        raise KeyError(f"suite {cls.name!r} declares no metric {name!r}")
