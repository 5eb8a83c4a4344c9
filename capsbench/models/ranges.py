"""The valid values of a model's constructor arguments, declared beside the class and checked without torch.

A model class may declare a literal class attribute, read from its source (capsbench.util.lazy) before anything is
imported:

    ARGUMENT_RANGES = {"routing_iterations": "int [1, inf)", "dropout": "[0, 1)", "padding": ["same", "valid"]}

A string is an interval (brackets closed, parentheses open, `inf` unbounded; a leading `int` asks for integers) that
a number, or every element of a list of numbers, must lie in; a list names the accepted values. Declaring ranges is
optional: arguments without one (and models without any) are passed through as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capsbench.errors import CapsbenchError

_INTERVAL = re.compile(r"^\s*(int\s+)?([\[(])\s*([^,\s]+)\s*,\s*([^,\s\])]+)\s*([\])])\s*$")


@dataclass(frozen=True)
class Interval:
    """low..high with open or closed ends; integers only when `integer`."""

    low: float
    high: float
    low_closed: bool
    high_closed: bool
    integer: bool

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        above = value >= self.low if self.low_closed else value > self.low
        below = value <= self.high if self.high_closed else value < self.high
        return above and below

    def words(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if math.isinf(self.high) and not math.isinf(self.low):
            return f"{kind} {'>=' if self.low_closed else '>'} {_number(self.low)}"
        if math.isinf(self.low) and not math.isinf(self.high):
            return f"{kind} {'<=' if self.high_closed else '<'} {_number(self.high)}"
        left, right = "[" if self.low_closed else "(", "]" if self.high_closed else ")"
        return f"{kind} in {left}{_number(self.low)}, {_number(self.high)}{right}"


def _number(x: float) -> str:
    return f"{x:g}"


def parse_range(text: str) -> Interval:
    """'int [1, inf)' -> Interval(1, inf, closed, open, integer); a ValueError for anything else."""
    match = _INTERVAL.match(text)
    if not match:
        raise ValueError(f"{text!r} is not an interval such as '[0, 1)' or 'int [1, inf)'")
    integer, left, low, high, right = match.groups()
    return Interval(float(low), float(high), left == "[", right == "]", integer is not None)


def check_value(where: str, value: Any, declared: str | list | tuple) -> None:
    """Raise a CapsbenchError saying what `where` must be when `value` lies outside its declared range."""
    if isinstance(declared, (list, tuple)):
        if value not in declared:
            raise CapsbenchError(f"{where} must be one of {', '.join(map(repr, declared))}, got {value!r}")
        return
    interval = parse_range(declared)
    many = isinstance(value, Sequence) and not isinstance(value, str)  # a list, tuple or OmegaConf ListConfig
    items = list(value) if many else [value]
    if not all(interval.contains(v) for v in items):
        what = f"a list whose every element is {interval.words()}" if many else interval.words()
        raise CapsbenchError(f"{where} must be {what}, got {items if many else value!r}")


def check_arguments(prefix: str, values: Mapping[str, Any], ranges: Mapping[str, Any]) -> None:
    """Every value of `values` that has a declared range must lie in it; the error names `<prefix>.<argument>`."""
    for name, value in values.items():
        if name in ranges:
            check_value(f"{prefix}.{name}", value, ranges[name])
