"""Reporting: tables built from records along each suite's layout, with significance (tables.py); Markdown, LaTeX and
CSV renderers; figures; a suite's files (outputs.py); and the `capsbench report` command (report.py): collection of
tracked runs (collect.py), published numbers (baselines.py), claims (claim_files.py) and their verdicts (verdicts.py),
assembled into one document (document.py)."""
