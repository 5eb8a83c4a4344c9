"""The house style of every figure (matplotlib rc settings), sized for one column of a two-column paper."""

WIDTH = 3.3  # inches: one column of a two-column paper
STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "lines.linewidth": 1.2, "lines.markersize": 3, "axes.grid": True, "grid.alpha": 0.3,
    "grid.linewidth": 0.5, "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 150,
    "savefig.dpi": 300, "pdf.fonttype": 42,
}
