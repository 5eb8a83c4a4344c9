"""Suite registry: one module per suite, each a Suite subclass registered by name.

CATALOG holds what is known without importing a suite (its class's location, description and typed Params);
SUITES.get(name) imports the suite class (and torch) on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from capsbench.suites.params import AffineParams, EfficiencyParams, NoParams, OverlapParams, RoutingParams
from capsbench.suites.robustness.params import RobustnessParams
from capsbench.util.lazy import class_literal, lazy_attributes, load, split_target
from capsbench.util.registry import LoadingView, Registry

if TYPE_CHECKING:
    from capsbench.suites.base import Suite


@dataclass(frozen=True)
class SuiteEntry:
    """A registered suite: its name, its class as "package.module:Class" and its Params dataclass (a torch-free
    module). The entry is the one source of both: loading the class gives it `name` and `Params` from here."""

    name: str
    target: str
    params: type = NoParams
    needs_data: bool = True  # False: the suite measures models, not images (no dataset files are read)

    def __post_init__(self) -> None:
        split_target(self.target)

    @property
    def description(self) -> str:
        """The class's `description`, read from its source."""
        return class_literal(self.target, "description")

    def load(self) -> type[Suite]:
        """The suite class, named and given its Params by this entry."""
        cls = load(self.target)
        cls.name, cls.Params = self.name, self.params
        return cls


CATALOG: Registry[SuiteEntry] = Registry("suite")
for _entry in (
    SuiteEntry("accuracy", "capsbench.suites.accuracy:AccuracySuite"),
    SuiteEntry("affine", "capsbench.suites.affine:AffineSuite", AffineParams),
    SuiteEntry("efficiency", "capsbench.suites.efficiency:EfficiencySuite", EfficiencyParams, needs_data=False),
    SuiteEntry("overlap", "capsbench.suites.overlap:OverlapSuite", OverlapParams),
    SuiteEntry("robustness", "capsbench.suites.robustness.suite:RobustnessSuite", RobustnessParams),
    SuiteEntry("robustness_l2", "capsbench.suites.robustness.suite:RobustnessL2Suite", RobustnessParams),
    SuiteEntry("routing", "capsbench.suites.routing:RoutingSuite", RoutingParams),
):
    CATALOG.register(_entry.name)(_entry)


SUITES: LoadingView[SuiteEntry, type[Suite]] = LoadingView(CATALOG, SuiteEntry.load)  # get(name): the Suite class
_LAZY = {
    "Context": "capsbench.suites.base:Context",
    "Metric": "capsbench.suites.base:Metric",
    "Suite": "capsbench.suites.base:Suite",
    "Variant": "capsbench.suites.base:Variant",
}

__getattr__ = lazy_attributes(__name__, _LAZY)  # the suite base types, imported on first use


__all__ = ["CATALOG", "SUITES", "Context", "Metric", "Suite", "SuiteEntry", "Variant"]
