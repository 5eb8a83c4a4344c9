"""Is the affine suite's worst-case grid (Engstrom et al. 2019, "Exploring the Landscape of Spatial Robustness",
arXiv:1712.02779) searched right? Evaluates a run's models again with a plain loop written here: one grid point at a
time over the digits still right, each transformed by the sweeps' float64 warp (capsbench.data.canvas.warp, not the
suite's grid_sample), first on the suite's grid, then on its finer twin (half the step in every family, so it holds
every point of the suite's grid). Per model and seed: the suite's worst-case accuracy (its records) and this loop's on
both grids, each with its 95 % Wilson interval; the digits on which the loop and the suite disagree on the same grid
(expected 0), and those the finer grid leaves right but the suite's grid breaks (must be 0). Ends with a Markdown
table and `affine_worst <model> s<seed> suite=X coarse=Y fine=Z disagree=K finer_not_above=yes|no` per unit.

    CAPSBENCH_DATA=DIR uv run python benchmarks/affine_worst_check.py --records RUN/affine/records.jsonl
        [--set key=value ...] [--cache-dir DIR]

--set repeats the run's own settings (budget, params.worst_*, ...) so that the same checkpoints and digits are found;
the checkpoints must be in the cache (the run trained them).
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import time

import numpy as np
import torch
from held_out import cached_units, check_parser, fail, run_records

from capsbench.data import as_images
from capsbench.data.affine_grid import TransformGrid
from capsbench.data.canvas import affine_matrix, centre_on_canvas, warp
from capsbench.data.test_subset import draw_test_subset
from capsbench.run.execute import load_data, trained
from capsbench.suites.worst_affine import grid_of
from capsbench.util.stats import decode_outcomes, wilson_interval


def reference(model, canvas: torch.Tensor, labels: torch.Tensor, grid: TransformGrid,
              batch: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """(right under every point of `grid`, right under every point of grid.finer()) per digit: the points of `grid`,
    then the finer grid's others. canvas (N, C, S, S) uint8, labels (N,)."""
    coarse = grid.points().tolist()
    known = {tuple(p) for p in coarse}
    right = np.ones(len(labels), dtype=bool)
    survive(model, canvas, labels, coarse, right, batch)
    on_coarse = right.copy()
    survive(model, canvas, labels, [p for p in grid.finer().points().tolist() if tuple(p) not in known], right, batch)
    return on_coarse, right


@torch.no_grad()
def survive(model, canvas: torch.Tensor, labels: torch.Tensor, points: list[list[float]], right: np.ndarray,
            batch: int) -> None:
    """Clear `right` (N,) for every digit still right that the model gets wrong under one of `points`, one point at a
    time (rotation degrees, dx, dy, scale) by the sweeps' warp."""
    for rotation, dx, dy, scale in points:
        live = np.flatnonzero(right)
        if len(live) == 0:
            return
        moved = warp(canvas[live], affine_matrix(rotation_deg=rotation, scale_x=scale, scale_y=scale),
                     torch.tensor([dx, dy], dtype=torch.float64))
        for start in range(0, len(live), batch):
            ids = live[start:start + batch]
            predicted = model(as_images(moved[start:start + batch])).scores.argmax(dim=1)
            right[ids[(predicted != labels[ids]).numpy()]] = False


def percent(right: np.ndarray) -> str:
    """'63.2 % [58.9, 67.3]': accuracy and its 95 % Wilson interval."""
    low, high = wilson_interval(int(right.sum()), len(right))
    return f"{100 * right.mean():.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def main() -> None:
    args = check_parser(__doc__.splitlines()[0], "affine").parse_args()
    worst = run_records(args.records, "worst_affine_accuracy", "run the affine suite with params.worst_images > 0")
    units = cached_units("affine", worst, args)
    table = ["| model | seed | suite, its grid | this loop, same grid | this loop, finer grid | disagree | "
             "right on finer, broken on suite's | seconds |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for unit in units:
        ucfg = unit.run_config()
        grid = grid_of(ucfg.params)
        mine = [r for r in worst if r["model"] == unit.model and int(r["seed"]) == unit.seed]
        record = max(mine, key=lambda r: float(r["max_rotation"]))
        if record["grid"] != grid.describe():
            fail(f"the records' grid {record['grid']!r} is not {grid.describe()!r}: pass the run's "
                 "params.worst_* settings with --set")
        splits = load_data(ucfg.dataset, ucfg.data)
        n = int(record["n"])
        pick = torch.from_numpy(draw_test_subset(splits.test_y.numpy(), n, seed=0).indices)  # the suite's digits
        canvas, labels = centre_on_canvas(splits.test_x[pick], ucfg.params.canvas), splits.test_y[pick]
        model = trained(unit).model.eval()
        start = time.perf_counter()
        coarse, fine = reference(model, canvas, labels, grid, ucfg.train.eval_batch_size)
        seconds = time.perf_counter() - start
        suite = decode_outcomes(record["outcomes"], n)
        disagree, above = int((suite != coarse).sum()), int((fine & ~suite).sum())
        table.append(f"| {unit.model} | {unit.seed} | {percent(suite)} | {percent(coarse)} | {percent(fine)} | "
                     f"{disagree} | {above} | {seconds:.0f} |")
        print(f"affine_worst {unit.model} s{unit.seed} suite={100 * suite.mean():.1f} coarse={100 * coarse.mean():.1f} "
              f"fine={100 * fine.mean():.1f} disagree={disagree} finer_not_above={'yes' if above == 0 else 'no'}",
              flush=True)
    grid = grid_of(units[0].run_config().params)
    print(f"\nsuite's grid: {grid.describe()}; finer grid: {grid.finer().describe()}\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
