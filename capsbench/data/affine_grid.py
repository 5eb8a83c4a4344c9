"""A grid of rotations, translations and scales about the canvas centre, and one transform per image by torch's
affine_grid and grid_sample: bilinear, zero outside, rounded to 8-bit levels, the geometry of the affine suite's
sweeps (capsbench.data.canvas.warp). The grid search of Engstrom et al. 2019 ("Exploring the Landscape of Spatial
Robustness", arXiv:1712.02779) takes each image's worst point of such a grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F


def spaced(limit: float, steps: int) -> list[float]:
    """`steps` (odd) values equally spaced over [-limit, limit], limit * i / m for i = -m..m: 0 is exactly one of them,
    and the values of 2 * steps - 1 (half the step) contain these exactly."""
    if steps < 1 or steps % 2 == 0:
        raise ValueError(f"a symmetric grid needs an odd number of steps (0 on the grid), got {steps}")
    m = (steps - 1) // 2
    return [limit * i / m for i in range(-m, m + 1)] if m else [0.0]


@dataclass(frozen=True)
class TransformGrid:
    """Every combination of `rotation_steps` rotations over [-rotation, rotation] degrees (counter-clockwise as
    displayed), `translation_steps` translations per axis over [-translation, translation] pixels, and
    `scale_steps` isotropic scales over [1 - scale, 1 + scale]: each an odd count, so the identity is on the grid."""

    rotation: float = 30.0
    rotation_steps: int = 31
    translation: float = 3.0
    translation_steps: int = 5
    scale: float = 0.0
    scale_steps: int = 1

    def points(self) -> torch.Tensor:
        """(G, 4) float64 rows (rotation degrees, dx, dy, scale), rotations outermost."""
        moves = spaced(self.translation, self.translation_steps)
        scales = [1.0 + s for s in spaced(self.scale, self.scale_steps)]
        rows = [(r, dx, dy, s) for r in spaced(self.rotation, self.rotation_steps) for dx in moves for dy in moves
                for s in scales]
        return torch.tensor(rows, dtype=torch.float64)

    def finer(self) -> TransformGrid:
        """The grid with half the step in every family (2 * steps - 1 values): it holds every point of this one."""
        return TransformGrid(self.rotation, 2 * self.rotation_steps - 1, self.translation,
                             2 * self.translation_steps - 1, self.scale, 2 * self.scale_steps - 1)

    def describe(self) -> str:
        """'rotation=-30:30:31 translation=-3:3:5 scale=1:1:1': each family's low:high:count (translation per axis)."""
        families = ((-self.rotation, self.rotation, self.rotation_steps),
                    (-self.translation, self.translation, self.translation_steps),
                    (1 - self.scale, 1 + self.scale, self.scale_steps))
        return " ".join(f"{name}={low:g}:{high:g}:{n}" for name, (low, high, n) in
                        zip(("rotation", "translation", "scale"), families))


def transform(images: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Each canvas under its own grid point: content rotated and scaled about the canvas centre, then moved by (dx, dy)
    pixels (x right, y down), as q = A (p - c) + c + (dx, dy) with A = scale * [[cos, sin], [-sin, cos]].

    Args:
        images: (N, C, S, S) uint8 canvases.
        points: (N, 4) rows (rotation degrees, dx, dy, scale).
    Returns (N, C, S, S) float32 in [0, 1] on the images' device, each pixel a multiple of 1/255 (float64 bilinear
    sampling with align_corners=True, so that pixel centres map to pixel centres, rounded half to even).
    """
    n, ch, size, _ = images.shape
    p = points.to(device=images.device, dtype=torch.float64)
    radians = p[:, 0] * (math.pi / 180.0)
    c = torch.round(torch.cos(radians), decimals=12)  # last-bit noise of cos(90 deg) must not move a pixel
    s = torch.round(torch.sin(radians), decimals=12)
    inverse = torch.stack([torch.stack([c, -s], 1), torch.stack([s, c], 1)], 1) / p[:, 3].view(n, 1, 1)  # (N, 2, 2)
    half = (size - 1) / 2.0  # pixels per unit of grid_sample's normalised coordinates
    offset = -(inverse @ (p[:, 1:3] / half).unsqueeze(2))  # (N, 2, 1): p = A^-1 (q - t)
    theta = torch.cat([inverse, offset], dim=2)  # (N, 2, 3) output -> input, normalised
    grid = F.affine_grid(theta, [n, ch, size, size], align_corners=True)
    out = F.grid_sample(images.to(torch.float64), grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    return torch.round(out).clamp_(0, 255).div_(255.0).float()
