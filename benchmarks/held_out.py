"""What the held-out checks (affine_worst_check.py, minimal_check.py) share: their command line's run options and the
run's records, read with a one-line error (exit 2) where the file is missing, unreadable or holds none to check, and the
run's units, whose checkpoints the run left in the cache."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.run.cost_model import checkpoint_cached
from capsbench.run.plan import plan
from capsbench.run.units import UnitSpec


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


def cached_units(suite: str, records: list[dict[str, Any]], args: argparse.Namespace) -> list[UnitSpec]:
    """The run's units of `suite` for the models and seeds in `records`, composed on a CPU with the run's settings
    (args.set, args.cache_dir); each one's checkpoint must be in the cache (the run trained it)."""
    models = sorted({r["model"] for r in records})
    seeds = sorted({int(r["seed"]) for r in records})
    overrides = [f"suite={suite}", f"models=[{','.join(models)}]", f"seeds=[{','.join(map(str, seeds))}]",
                 "device=cpu", *([f"cache_dir={args.cache_dir}"] if args.cache_dir else []), *args.set]
    units = plan(compose(parse_command_line(overrides)))
    for unit in units:
        if not checkpoint_cached(unit):
            fail(f"no cached checkpoint for {unit.model} seed {unit.seed}: pass the run's --cache-dir and its settings "
                 "with --set")
    return units


def fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2, as capsbench's own commands end on bad input."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)
