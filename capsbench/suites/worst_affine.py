"""Each digit's worst transformation over a grid of rotations, translations and scales, by forward passes only (the
grid search of Engstrom et al. 2019, "Exploring the Landscape of Spatial Robustness", arXiv:1712.02779)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from capsbench.attacks.base import without_unused_heads
from capsbench.data.affine_grid import TransformGrid, transform
from capsbench.models import Classifier
from capsbench.train.evaluation import correct
from capsbench.util.progress import Progress
from capsbench.util.stats import accuracy_fields


def grid_of(params: Any) -> TransformGrid:
    """The affine suite's worst-case grid from its params.worst_* settings."""
    return TransformGrid(float(params.worst_rotation), int(params.worst_rotation_steps),
                         float(params.worst_translation), int(params.worst_translation_steps),
                         float(params.worst_scale), int(params.worst_scale_steps))


@torch.no_grad()
def first_mistakes(model: Classifier, canvas: torch.Tensor, labels: torch.Tensor, clean: np.ndarray,
                   grid: TransformGrid, *, batch_size: int, device: str,
                   settled: Callable[[int], None] = lambda done: None) -> np.ndarray:
    """(N,) per digit the smallest |rotation| (degrees) of a grid point it misclassifies; inf where it gets every
    point right, 0 where it is wrong untransformed (`clean`, the identity point).

    The grid is taken in rounds of equal |rotation|, smallest first, and a digit leaves at its first mistake, so the
    worst case over the points with |rotation| <= R is `result > R` for every R on the grid. A batch holds
    `batch_size` (digit, point) pairs, several points of a round at once when few digits are left. `settled(k)`: k of
    the N x (G - 1) pairs are evaluated or no longer needed.

    Args:
        canvas: (N, C, S, S) uint8 digits on the canvas; labels: (N,); clean: (N,) bool.
    """
    points = grid.points()  # (G, 4)
    identity = (points == torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)).all(dim=1)
    size = points[:, 0].abs()
    rounds = [torch.nonzero((size == r) & ~identity).squeeze(1) for r in sorted(set(size.tolist()))]
    first = np.where(clean, np.inf, 0.0)
    total, left = len(labels) * (len(points) - 1), len(points) - 1  # pairs; points still ahead of every live digit
    was_training = model.training
    model.eval()
    with without_unused_heads(model):  # the decision reads no reconstruction
        for todo in rounds:
            radius = float(size[todo[0]])
            done = 0
            while done < len(todo) and (alive := np.flatnonzero(np.isinf(first))).size:
                chunk = todo[done:done + max(1, batch_size // len(alive))]  # (P,) point indices
                done += len(chunk)
                pair_image = torch.from_numpy(alive).repeat(len(chunk))  # (P * A,) point-major
                pair_point = chunk.repeat_interleave(len(alive))
                for start in range(0, len(pair_image), batch_size):
                    img, pts = pair_image[start:start + batch_size], pair_point[start:start + batch_size]
                    x = transform(canvas[img].to(device), points[pts])  # (B, C, S, S)
                    wrong = (model(x).scores.argmax(dim=1).cpu() != labels[img]).numpy()
                    first[img.numpy()[wrong]] = radius
                left -= len(chunk)
                settled(total - int(np.isinf(first).sum()) * left)
            left -= len(todo) - done  # the round's points no digit needs any more
    model.train(was_training)
    settled(total)
    return first


def worst_records(model: Classifier, name: str, canvas: torch.Tensor, labels: torch.Tensor, grid: TransformGrid, *,
                  batch_size: int, device: str, settled: Callable[[int], None]) -> list[dict[str, Any]]:
    """grid_clean_accuracy (the digits untransformed) and worst_affine_accuracy at every max_rotation R of the grid
    (each digit right under every point with |rotation| <= R), each with the grid's description."""
    clean = correct(model, canvas, labels, batch_size=batch_size, device=device).numpy()  # the identity point
    total = len(labels) * (len(grid.points()) - 1)
    with Progress(f"worst affine {name}", total, unit="pair", count="transformed digits") as bar:
        def step(k: int) -> None:
            bar.update(k - bar.done)
            settled(k)

        bar.note(f"{grid.describe()} on {len(labels):,} digits")
        first = first_mistakes(model, canvas, labels, clean, grid, batch_size=batch_size, device=device,
                               settled=step)
    described = grid.describe()
    radii = sorted({abs(float(r)) for r in grid.points()[:, 0]})
    return [{"metric": "grid_clean_accuracy", **accuracy_fields(clean), "grid": described}] + [
        {"metric": "worst_affine_accuracy", **accuracy_fields(first > r), "max_rotation": r, "grid": described}
        for r in radii]
