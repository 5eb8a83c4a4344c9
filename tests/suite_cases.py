"""The one table of hand-made records per suite (report_fixtures), for the tests that pin what a person reads: the
golden Markdown and the LaTeX. A suite without a row here is still measured and rendered by the registry's own test
(test_suite_registry.py)."""

from __future__ import annotations

import report_fixtures as fixtures

CASES = {
    "accuracy": (fixtures.accuracy, fixtures.accuracy_published),
    "affine": (fixtures.affine, list),
    "efficiency": (fixtures.efficiency, fixtures.efficiency_published),
    "overlap": (fixtures.overlap, fixtures.overlap_published),
    "robustness": (fixtures.robustness, list),
    "routing": (fixtures.routing, list),
}
