"""What the held-out checks (affine_worst_check.py, minimal_check.py) share: their command line's run options and the
run's records, read with a one-line error (exit 2) where the file is missing, unreadable or holds none to check."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn


def check_parser(description: str, what: str) -> argparse.ArgumentParser:
    """A parser with the options every held-out check takes: the records of run `what` and the run's own settings."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--records", type=Path, required=True, help=f"the {what} run's records.jsonl")
    parser.add_argument("--set", nargs="*", default=[], help="the run's settings (key=value), e.g. budget=smoke")
    parser.add_argument("--cache-dir", default=None, help="the run's checkpoint cache (default: capsbench's)")
    return parser


def run_records(path: Path, metric: str, how: str) -> list[dict[str, Any]]:
    """The records of `metric` in the run's records.jsonl at `path`; `how`: the run that makes them, for the error."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"--records {path}: cannot read it as a run's records.jsonl ({exc})")
    found = [r for r in rows if isinstance(r, dict) and r.get("metric") == metric]
    if not found:
        fail(f"{path} holds no {metric} records: {how} first")
    return found


def fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2, as capsbench's own commands end on bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)
