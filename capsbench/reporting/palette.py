"""One look per model in every figure and report: a colour from a fixed colour-blind-safe palette (Okabe and Ito), a
marker and a line style, keyed by the model's position among the built-in models, or for any other model by a hash of
its name, so that a model looks the same in every figure of every process. Marker and line style keep models apart in
greyscale too."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from capsbench.models import MODELS
from capsbench.models.external import BUILT_INS

# Okabe and Ito, "Color Universal Design" (2008): distinct for colour-blind readers; black first, grey last
COLORS = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#999999")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINES = ("-", "--", ":", "-.")
BUILT_IN_ORDER = tuple(n for n in MODELS.names() if n in BUILT_INS)  # registration order, aliases left out
OTHERS = 64  # hash buckets of models that are not built in, placed after the built-ins


@dataclass(frozen=True)
class Look:
    """How a model (or one series of a figure) is drawn."""

    color: str
    marker: str
    linestyle: str


def series_look(index: int, variant: str = "") -> Look:
    """The look of the index-th series: colour and marker in step, the line style changing every len(COLORS) series;
    a variant (e.g. "training=pgd") keeps the colour and marker of its series and gets a line style of its own."""
    shift = 1 + zlib.crc32(variant.encode()) % (len(LINES) - 1) if variant else 0
    return Look(COLORS[index % len(COLORS)], MARKERS[index % len(MARKERS)],
                LINES[(index // len(COLORS) + shift) % len(LINES)])


def model_look(model: str) -> Look:
    """A model's look: "capsnet" by its place among the built-in models; "capsnet (training=pgd)" as capsnet with a
    line style of its own; any other model by a hash of its name (the same in every process)."""
    base, _, variant = model.partition(" (")
    if base in BUILT_IN_ORDER:
        index = BUILT_IN_ORDER.index(base)
    else:
        index = len(BUILT_IN_ORDER) + zlib.crc32(base.encode()) % OTHERS
    return series_look(index, variant.rstrip(")"))
