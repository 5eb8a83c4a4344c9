"""Golden Markdown per suite from fixed records: header names, row order, bold cells and footnotes are pinned, so a
layout change is a visible diff in tests/golden/<suite>.md. Regenerate deliberately with CAPSBENCH_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from suite_cases import CASES

from capsbench.reporting import markdown
from capsbench.reporting.frame import records_frame
from capsbench.reporting.outputs import suite_layout
from capsbench.reporting.tables import build_tables
from capsbench.suites import CATALOG, SUITES

GOLDEN = Path(__file__).parent / "golden"


def rendered(name: str) -> str:
    suite = SUITES.get(name)
    make, published = CASES[name]
    records = make()
    notes = suite().notes(records, CATALOG.get(name).params())
    tables = build_tables(records_frame(records, suite), suite, suite_layout(suite), published(), notes)
    return markdown.render_tables(tables)


def test_every_case_is_a_registered_suite():
    assert set(CASES) <= set(SUITES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_markdown_tables_match_the_golden_file(name):
    path = GOLDEN / f"{name}.md"
    text = rendered(name)
    if os.environ.get("CAPSBENCH_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; write it with CAPSBENCH_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), (
        f"{name}'s tables changed; if intended, rerun with CAPSBENCH_UPDATE_GOLDEN=1 and review the diff"
    )
