"""Suite registry: one module per suite, each a Suite subclass registered by name."""

from capsbench.registry import Registry
from capsbench.suites.accuracy import AccuracySuite
from capsbench.suites.affine import AffineSuite
from capsbench.suites.base import Context, Metric, Suite
from capsbench.suites.overlap import OverlapSuite
from capsbench.suites.robustness import RobustnessSuite

SUITES: Registry[type[Suite]] = Registry("suite")
for _suite in (AccuracySuite, AffineSuite, OverlapSuite, RobustnessSuite):
    SUITES.register(_suite.name)(_suite)

__all__ = ["SUITES", "Context", "Metric", "Suite"]
