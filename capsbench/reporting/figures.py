"""Figures in one house style, sized for one column of a two-column paper (3.3 in wide): metrics against a sweep
with Wilson-interval (one seed) or std (several seeds) bands, accuracy against MACs; saved as PDF and PNG. Each model
has one look (capsbench.reporting.palette) in every figure; with one model, the panels of a faceted figure become
lines of one panel."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from capsbench.reporting.frame import ordered_values, row_models, select  # noqa: E402
from capsbench.reporting.palette import Look, model_look, series_look  # noqa: E402
from capsbench.suites.layout import SweepPlot  # noqa: E402
from capsbench.util.atomic import atomic_file  # noqa: E402
from capsbench.util.style import STYLE, WIDTH  # noqa: E402


def sweep_figure(frame: pd.DataFrame, spec: SweepPlot, suite: Any) -> Figure | None:
    """spec's metrics against spec.x from tidy records; None when the records have nothing to draw."""
    data = select(frame[frame["metric"].isin(spec.metrics)], spec.keep, spec.drop)
    data = data.assign(model=row_models(data))  # a PGD-trained model is a line of its own: "capsnet (training=pgd)"
    if spec.facet and len(data.groupby(["model", "dataset"])) == 1:
        return _overlaid(data, spec, suite)
    facets = ordered_values(data, spec.facet.by, spec.facet.order) if spec.facet else [None]
    panels = [
        (m, f) for m in spec.metrics for f in facets if not _panel(data, spec, m, f).dropna(subset=[spec.x]).empty
    ]
    if not panels:
        return None
    several = len(ordered_values(data, "dataset")) > 1
    cols = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / cols)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            rows,
            cols,
            figsize=(WIDTH, 2.2 if rows == cols == 1 else 1.6 * rows),
            squeeze=False,
            sharex=spec.share_x,
            sharey=len(spec.metrics) == 1,
        )
        handles: dict[str, Any] = {}
        for k, (metric, facet) in enumerate(panels):
            ax = axes.flat[k]
            _draw(ax, _panel(data, spec, metric, facet), spec.x, several, handles)
            unit = suite.metric(metric).unit
            if k % cols == 0 or len(spec.metrics) > 1:
                ax.set_ylabel(
                    spec.ylabels[spec.metrics.index(metric)] if spec.ylabels else f"{metric.replace('_', ' ')} ({unit})"
                )
            if k + cols >= len(panels):  # nothing below: this panel carries the x axis
                ax.set_xlabel(spec.xlabel or spec.x)
                ax.xaxis.set_tick_params(labelbottom=True)
            if facet is not None:
                ax.set_title(spec.facet.label(facet))
        for ax in axes.flat[len(panels) :]:
            ax.set_visible(False)
        order = {m: i for i, m in enumerate(ordered_values(data, "model"))}  # the tables' row order
        labels = sorted(handles, key=lambda label: order.get(label.split(" / ")[0], len(order)))
        ncol = min(3, len(labels))
        labels = [labels[i] for i in legend_order(len(labels), ncol)]
        fig.legend(
            [handles[label] for label in labels],
            labels,
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            ncol=ncol,
            frameon=False,
        )
        fig.tight_layout(pad=0.3, w_pad=1.0)
    return fig


def legend_order(n: int, ncol: int) -> list[int]:
    """Matplotlib fills a legend's columns top to bottom; this order of n entries makes it read left to right, row
    by row (its first n % ncol columns hold one entry more than the others)."""
    rows, large = divmod(n, ncol)
    heights = [rows + (c < large) for c in range(ncol)]
    cells = [(r, c) for r in range(max(heights, default=0)) for c in range(ncol) if r < heights[c]]  # reading order
    position = {cell: i for i, cell in enumerate(cells)}
    return [position[(r, c)] for c in range(ncol) for r in range(heights[c])]


def _panel(data: pd.DataFrame, spec: SweepPlot, metric: str, facet: Any) -> pd.DataFrame:
    part = data[data["metric"] == metric]
    return part if facet is None else select(part, {spec.facet.by: facet})


def _draw(ax: Any, part: pd.DataFrame, x: str, several: bool, handles: dict[str, Any]) -> None:
    """One line per model with its band; a model without x values is a dashed reference line."""
    for (model, dataset), rows in part.groupby(["model", "dataset"], sort=False):
        label = f"{model} / {dataset}" if several else model
        _line(ax, rows, x, model_look(model), label, handles)
    if len(part) and all(float(v).is_integer() for v in part[x].dropna()):
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))


def _line(ax: Any, rows: pd.DataFrame, x: str, look: Look, label: str, handles: dict[str, Any]) -> None:
    """One series with its band in its look; without x values, a dashed reference line at its mean."""
    swept = rows.dropna(subset=[x])
    if swept.empty:
        handles.setdefault(label, ax.axhline(rows["value"].mean(), color=look.color, linestyle="--", linewidth=1.0))
        return
    stats = _stats(swept, x)
    (line,) = ax.plot(stats.index, stats["mean"], marker=look.marker, linestyle=look.linestyle, color=look.color)
    if stats["low"].notna().any():
        ax.fill_between(stats.index, stats["low"], stats["high"], color=look.color, alpha=0.18, linewidth=0)
    handles.setdefault(label, line)


def _overlaid(data: pd.DataFrame, spec: SweepPlot, suite: Any) -> Figure | None:
    """One model's faceted figure as one panel: a line per facet value (e.g. per attack), in the facets' order."""
    facets = [f for f in ordered_values(data, spec.facet.by, spec.facet.order)
              if not _panel(data, spec, spec.metrics[0], f).dropna(subset=[spec.x]).empty]
    if not facets:
        return None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(WIDTH, 2.4))
        handles: dict[str, Any] = {}
        for i, facet in enumerate(facets):
            _line(ax, _panel(data, spec, spec.metrics[0], facet), spec.x, series_look(i), spec.facet.label(facet),
                  handles)
        metric = spec.metrics[0]
        ax.set_ylabel(spec.ylabels[0] if spec.ylabels else f"{metric.replace('_', ' ')} ({suite.metric(metric).unit})")
        ax.set_xlabel(spec.xlabel or spec.x)
        ax.set_title(str(data["model"].iloc[0]))
        fig.legend(list(handles.values()), list(handles), loc="lower center", bbox_to_anchor=(0.5, 1.0),
                   ncol=min(3, len(handles)), frameon=False)
        fig.tight_layout(pad=0.3)
    return fig


def _stats(rows: pd.DataFrame, x: str) -> pd.DataFrame:
    """Per x: mean, and the band: mean ± sample std over seeds, or the one seed's Wilson interval."""
    out = []
    for xv, g in rows.groupby(rows[x].astype(float), sort=True):
        mean = g["value"].astype(float).mean()
        if g["seed"].nunique() > 1:
            std = g["value"].astype(float).std()
            low, high = mean - std, mean + std
        elif "ci_low" in g and g["ci_low"].notna().all():
            low, high = float(g["ci_low"].iloc[0]), float(g["ci_high"].iloc[0])
        else:
            low = high = float("nan")
        out.append({"x": xv, "mean": mean, "low": low, "high": high})
    return pd.DataFrame(out).set_index("x")


def accuracy_vs_cost(points: pd.DataFrame, *, xlabel: str, ylabel: str) -> Figure:
    """One point per model (columns model, cost, mean, low, high): accuracy against cost on a log axis, with the
    interval as error bars and the model's name beside its point."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(WIDTH, 2.4))
        for p in points.itertuples(index=False):
            look = model_look(p.model)
            err = [[p.mean - p.low], [p.high - p.mean]] if pd.notna(p.low) else None
            ax.errorbar([p.cost], [p.mean], yerr=err, fmt=look.marker, color=look.color, capsize=2, label=p.model)
            ax.annotate(p.model, (p.cost, p.mean), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_xscale("log")
        # Ticks at 1, 2 and 5 of each decade as plain numbers; unlabelled minor ticks (matplotlib labels minor ticks
        # of a log axis spanning less than a decade in scientific notation, and those labels collide)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.margins(x=0.25, y=0.15)
        fig.tight_layout(pad=0.3)
    return fig


def save_figure(fig: Figure, stem: Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Write `stem.png` and `stem.pdf` atomically and close the figure; PNGs at the style's savefig.dpi (300), passed
    here because the style's rc context is no longer active when a figure is saved."""
    paths = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        with atomic_file(path, "wb") as fh:
            fig.savefig(fh, format=fmt, bbox_inches="tight", dpi=STYLE["savefig.dpi"])
        paths.append(path)
    plt.close(fig)
    return paths
