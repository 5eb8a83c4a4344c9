"""Numbers as text, the same digits in every format: a std to two significant digits and the mean to the same
decimal place, a one-seed percentage over n items to the decimals that resolve one item (count_decimals), intervals
of a percentage to one decimal (of any other value to its own decimals), published numbers exactly as the paper
printed them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from capsbench.reporting.model import Cell, Flags, Measured, Published

FLOAT_NOISE = 1e-9  # a spread below this share of the mean is rounding in the sum, not a spread (an exact count)


def format_value(mean: float, std: float | None, unit: str) -> tuple[str, str | None]:
    """Mean and std as text with sensible digits: a positive std to two significant digits and the mean to
    the same decimal place; otherwise % to two decimals, numbers from 1,000 up as whole numbers with thousands
    separators, anything else
    to 4 significant digits."""
    if std is not None and math.isfinite(std) and std > FLOAT_NOISE * abs(mean):
        decimals = min(6, max(0, 1 - math.floor(math.log10(std))))
        return f"{mean:.{decimals}f}", f"{std:.{decimals}f}"
    if unit == "%" and abs(mean) < 1000:
        text = f"{mean:.2f}"
    else:
        text = f"{mean:,.0f}" if abs(mean) >= 1000 else f"{mean:.4g}"
    if std is None or not math.isfinite(std):
        return text, None
    return text, f"{0:.{_decimals(text)}f}"  # a zero spread, shown at the mean's precision


def count_decimals(n: int) -> int:
    """Decimals of a percentage over n items: the fewest that tell one item from the next (100/n % apart), at most
    two: none up to n = 100, one up to n = 1,000, two beyond. A digit finer than one item's share says nothing, and
    two decimals (the papers' precision) are already finer than the 95 % interval's half-width at the usual test-set
    sizes."""
    return min(2, max(0, math.ceil(math.log10(n / 100) - 1e-9))) if n > 0 else 2


@dataclass(frozen=True)
class CellText:
    """The parts of a cell every format composes in its own markup."""

    main: str  # the number ("–" where there is none)
    spread: str | None = None  # std over seeds, or a published std
    interval: tuple[str, str] | None = None  # one seed: 95 % Wilson interval
    seeds: int | None = None  # set when the cell has fewer seeds than the table's most
    ref: int | None = None  # citation footnote of a published number


def cell_text(cell: Cell | None, unit: str, max_seeds: int) -> CellText:
    """The text parts of a cell (None: no value)."""
    if cell is None:
        return CellText("–")
    if isinstance(cell, Flags):
        return CellText(",".join(cell.symbols) or "ok")
    if isinstance(cell, Published):
        value = f"{int(cell.value):,}" if float(cell.value).is_integer() else f"{cell.value:g}"
        return CellText(value, None if cell.std is None else f"{cell.std:g}", ref=cell.ref)
    assert isinstance(cell, Measured)
    main, spread = format_value(cell.mean, cell.std if cell.seeds > 1 else None, unit)
    if cell.seeds == 1 and cell.interval and unit == "%":
        main = f"{cell.mean:.{count_decimals(cell.interval[2])}f}"
    decimals = 1 if unit == "%" else _decimals(main)  # a median distance's interval at its own precision
    interval = (f"{cell.interval[0]:.{decimals}f}", f"{cell.interval[1]:.{decimals}f}") if cell.interval else None
    return CellText(main, spread, interval, cell.seeds if cell.seeds < max_seeds else None)


def _decimals(text: str) -> int:
    """The decimals a number's text shows (0 for '12' or '1e+05')."""
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def header_text(label: str, unit: str, detail: str = "") -> str:
    """A one-line header: "latency, batch 1 (ms)"."""
    return label + (f", {detail}" if detail else "") + (f" ({unit})" if unit else "")
