"""Finished units on disk: <output_dir>/<suite>/units/<unit key>.json, written atomically the moment a unit's result
arrives, so a killed run keeps every unit it finished and the same command measures only what is missing.

Each file holds the result and the sha256 of its content. A file that fails its checksum (edited by hand, damaged) or
the schema (a record without a field the tables read, a value outside its own interval) is named in a warning, moved
aside to <name>.corrupt-<UTC time> and its unit measured again: a result is used only as it was measured."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from capsbench.run.units import UnitResult, UnitSpec
from capsbench.util.atomic import write_text
from capsbench.util.stats import decode_outcomes, decode_values

log = logging.getLogger(__name__)
FORMAT = 2  # of the unit file: {"format", "sha256", "result"}; format 1 files (no checksum) are measured again
RECORD_FIELDS = ("suite", "model", "dataset", "seed", "metric", "value")


class UnreadableUnit(ValueError):
    """A unit file that cannot be trusted; the message says why."""


def _canonical(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True, default=str)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def encode(result: UnitResult) -> str:
    """The unit file's text: the result and the sha256 of its canonical JSON."""
    text = _canonical(result.to_dict())
    return json.dumps({"format": FORMAT, "sha256": _digest(text), "result": json.loads(text)})


def decode(text: str) -> UnitResult:
    """The result in a unit file's text, or UnreadableUnit saying why it cannot be trusted."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UnreadableUnit(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("result"), dict):
        raise UnreadableUnit(f"not a unit file of format {FORMAT}")
    if _digest(_canonical(data["result"])) != data.get("sha256"):
        raise UnreadableUnit("its content does not match its sha256: it was changed after it was written")
    check_fields(data["result"], UnitResult)
    result = UnitResult.from_dict(data["result"])
    for i, record in enumerate(result.records):
        check_record(record, i)
    return result


def check_fields(data: Any, cls: type, where: str = "") -> None:
    """`data` holds every field of dataclass `cls` without a default, no other field, and each of the type `cls`
    declares (a nested dataclass field as a mapping of its own fields): the schema is the dataclass itself."""
    if not isinstance(data, dict):
        raise UnreadableUnit(f"{where.rstrip('.') or 'its result'} is a {type(data).__name__}, not a mapping")
    hints, fields = typing.get_type_hints(cls), dataclasses.fields(cls)
    for f in fields:
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise UnreadableUnit(f"it lacks the field {where}{f.name}")
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            check_fields(data[f.name], hints[f.name], f"{where}{f.name}.")
        elif not _conforms(data[f.name], hints[f.name]):
            expected = str(hints[f.name]).replace("typing.", "").replace("<class '", "").replace("'>", "")
            raise UnreadableUnit(f"its field {where}{f.name} is {_a(type(data[f.name]).__name__)}, not {expected}")
    unknown = sorted(set(data) - {f.name for f in fields})
    if unknown:
        raise UnreadableUnit(f"it has unknown field(s) {', '.join(where + k for k in unknown)}")


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of a declared type: str, bool, int, float (ints too), None, Any, X | Y, list[X] and
    dict[K, V] (a bool is no number)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(k, args[0]) and _conforms(v, args[1])
                                               for k, v in value.items())
    if hint in (int, float):
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    return isinstance(value, type(None) if hint is None or hint is type(None) else hint)


def check_record(record: Any, index: int) -> None:
    """A record has every field the tables read, names that are text, an integer seed, a finite value inside its own
    interval (if any), and per-image outcomes and values (if any) that decode to its n images."""
    if not isinstance(record, dict):
        raise UnreadableUnit(f"record {index} is not a mapping")
    absent = [f for f in RECORD_FIELDS if f not in record]
    if absent:
        raise UnreadableUnit(f"record {index} ({record.get('metric', '?')}) lacks {', '.join(absent)}")
    named = f"record {index} ({record['metric']})"
    for field in ("suite", "model", "dataset", "metric"):
        if not isinstance(record[field], str):
            raise UnreadableUnit(f"{named} has the {field} {record[field]!r}, not a name")
    if not _is_int(record["seed"]):
        raise UnreadableUnit(f"{named} has the seed {record['seed']!r}, not an integer")
    value, low, high = record["value"], record.get("ci_low"), record.get("ci_high")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnreadableUnit(f"{named} has the value {value!r}, not a finite number")
    bounds = [b for b in (value, low, high) if isinstance(b, (int, float)) and math.isfinite(b)]
    if len(bounds) == 3 and not low - 1e-9 <= value <= high + 1e-9:  # a rounding error is no edit
        raise UnreadableUnit(f"{named} has the value {value} outside its own interval [{low}, {high}]")
    n = record.get("n")
    if n is not None and not (_is_int(n) and n >= 0):
        raise UnreadableUnit(f"{named} has n={n!r}, not a count of images")
    for field, decode in (("outcomes", decode_outcomes), ("per_image", decode_values)):
        text = record.get(field)
        if text is None:
            continue
        try:
            if n is None or not isinstance(text, str):
                raise ValueError(f"{type(text).__name__} with n={n}")
            decode(text, n)
        except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
            raise UnreadableUnit(f"{named} has {field} that do not decode to its n images ({exc})") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        write_text(path, encode(result))
        return path

    def load(self, spec: UnitSpec) -> UnitResult | None:
        """The stored result of this exact unit, or None. A file that cannot be trusted is named, moved aside and
        ignored, so that the unit is measured again."""
        path = self.path(spec)
        if not path.exists():
            return None
        try:
            result = decode(path.read_text(errors="replace"))
            if result.key != spec.key or result.status != "done":
                raise UnreadableUnit(f"it holds unit {result.key} ({result.status}), not the finished unit {spec.key}")
        except UnreadableUnit as exc:
            aside = path.with_name(f"{path.name}.corrupt-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
            path.replace(aside)
            log.warning("unit result %s of %s cannot be trusted (%s); moved it to %s and measuring the unit again",
                        path, spec.name, exc, aside.name)
            return None
        return result
