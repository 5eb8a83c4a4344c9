"""Figures in one house style: metric-vs-sweep curves per model (mean ± std over seeds), saved as PNG and PDF."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from capsbench.atomic import atomic_file  # noqa: E402

STYLE = {"figure.dpi": 120, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False}


@dataclass(frozen=True)
class SweepPlot:
    """A curve of `metric` against the sweep column `x`, one line per model, one panel per `facet` value."""

    name: str
    metric: str
    x: str
    facet: str | None = None
    xlabel: str | None = None
    ylabel: str | None = None


def sweep_figure(frame: pd.DataFrame, spec: SweepPlot) -> Figure:
    """Mean ± std over seeds of spec.metric against spec.x from tidy records."""
    data = frame[frame["metric"] == spec.metric].dropna(subset=[spec.x])
    facets = list(dict.fromkeys(data[spec.facet])) if spec.facet else [None]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(facets), figsize=(3.6 * len(facets), 3.0), squeeze=False, sharey=True)
        for ax, facet in zip(axes[0], facets):
            part = data if facet is None else data[data[spec.facet] == facet]
            for model, rows in part.groupby("model", sort=False):
                stats = rows.groupby(spec.x)["value"].agg(["mean", "std"]).sort_index()
                ax.plot(stats.index, stats["mean"], marker="o", markersize=3, label=model)
                if stats["std"].notna().any():
                    ax.fill_between(stats.index, stats["mean"] - stats["std"], stats["mean"] + stats["std"], alpha=0.2)
            ax.set_xlabel(spec.xlabel or spec.x)
            ax.set_title(f"{spec.facet} = {facet}" if facet is not None else spec.name)
        axes[0][0].set_ylabel(spec.ylabel or spec.metric)
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
    return fig


def save_figure(fig: Figure, stem: Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Write `stem.png` and `stem.pdf` atomically and close the figure."""
    paths = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        with atomic_file(path, "wb") as fh:
            fig.savefig(fh, format=fmt, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths
