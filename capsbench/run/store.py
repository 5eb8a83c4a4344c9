"""Finished units on disk: <output_dir>/<suite>/units/<unit key>.json, written atomically the moment a unit's result
arrives, so a killed run keeps every unit it finished and the same command measures only what is missing."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path

from capsbench.run.units import UnitResult, UnitSpec
from capsbench.util.atomic import write_text

log = logging.getLogger(__name__)


class UnitStore:
    """Results of finished units of every suite under one output directory."""

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)

    def path(self, spec: UnitSpec) -> Path:
        return self.output_dir / spec.suite / "units" / f"{spec.key}.json"

    def save(self, result: UnitResult) -> Path:
        """Keep a finished unit (failed ones are not kept: the next run tries them again)."""
        if result.status != "done":
            raise ValueError(f"only finished units are stored, not {result.spec.name} ({result.status})")
        path = self.path(result.spec)
        write_text(path, json.dumps(result.to_dict(), default=str))
        return path

    def load(self, spec: UnitSpec) -> UnitResult | None:
        """The stored result of this exact unit, or None. An unreadable file is reported, moved aside and ignored."""
        path = self.path(spec)
        if not path.exists():
            return None
        try:
            result = UnitResult.from_dict(json.loads(path.read_text()))
        except (ValueError, TypeError, KeyError) as exc:  # truncated or foreign JSON: measure the unit again
            aside = path.with_name(f"{path.name}.corrupt-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
            path.replace(aside)
            log.warning(
                "unreadable unit result %s (%s); moved to %s and measuring the unit again", path, exc, aside.name
            )
            return None
        return result if result.key == spec.key and result.status == "done" else None
