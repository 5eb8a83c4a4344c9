"""Suite registry: one module per suite, each a Suite subclass registered by name."""

from capsbench.registry import Registry
from capsbench.suites.accuracy import AccuracySuite
from capsbench.suites.affine import AffineSuite
from capsbench.suites.base import Context, Metric, Suite, Variant
from capsbench.suites.efficiency import EfficiencySuite
from capsbench.suites.overlap import OverlapSuite
from capsbench.suites.robustness import RobustnessSuite
from capsbench.suites.routing import RoutingSuite

SUITES: Registry[type[Suite]] = Registry("suite")
for _suite in (AccuracySuite, AffineSuite, EfficiencySuite, OverlapSuite, RobustnessSuite, RoutingSuite):
    SUITES.register(_suite.name)(_suite)

__all__ = ["SUITES", "Context", "Metric", "Suite", "Variant"]
