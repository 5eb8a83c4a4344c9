"""Where the shipped declarative data lives: `suites/` (budgets and suite YAML) and `baselines/` (published numbers
and claims), in the repository checkout or inside the installed wheel."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_dir() -> Path:
    """The directory holding `suites/` and `baselines/`: the repository root, or the installed wheel's copy."""
    repo = Path(__file__).resolve().parents[2]
    if (repo / "suites").is_dir():
        return repo
    return Path(str(resources.files("capsbench") / "_data"))
