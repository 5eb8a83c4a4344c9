"""Random affine training augmentation on the canvas (train.augment=affine): the "CNN with affine augmentation"
baseline of the affine suite. Draws per image, warps about the canvas centre, then places the digit on the canvas."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from capsbench.data.canvas import centre_on_canvas


@dataclass(frozen=True)
class AugmentRanges:
    """Uniform ranges of the training transforms: rotation in [-max_rotation_deg, max_rotation_deg] degrees, horizontal
    shear in [-max_shear, max_shear], x and y scale each in [min_scale, max_scale]; translation is any integer placement
    that keeps all ink on the canvas. The defaults equal affNIST's test ranges (capsbench.data.affnist_style)."""

    max_rotation_deg: float = 20.0
    max_shear: float = 0.2
    min_scale: float = 0.8
    max_scale: float = 1.2


def affine_matrices(
    rotation_deg: torch.Tensor, shear: torch.Tensor, scale_x: torch.Tensor, scale_y: torch.Tensor
) -> torch.Tensor:
    """(N,) each -> (N, 2, 2): A = R(rotation) @ H(shear) @ S(scale_x, scale_y) on (x, y) column vectors, y down;
    the batched form of capsbench.data.canvas.affine_matrix (same convention, same entries)."""
    theta = rotation_deg * (math.pi / 180.0)
    c, s = torch.cos(theta), torch.sin(theta)
    rows = [
        torch.stack([c * scale_x, (c * shear + s) * scale_y], dim=-1),
        torch.stack([-s * scale_x, (c - s * shear) * scale_y], dim=-1),
    ]
    return torch.stack(rows, dim=-2)  # (N, 2, 2)


def draw_transforms(n: int, ranges: AugmentRanges, generator: torch.Generator) -> torch.Tensor:
    """(n, 4) float64 draws: rotation_deg, shear, scale_x, scale_y, each uniform in its range."""
    u = torch.rand(n, 4, generator=generator, dtype=torch.float64)  # (n, 4) in [0, 1)
    return torch.stack(
        [
            (2 * u[:, 0] - 1) * ranges.max_rotation_deg,
            (2 * u[:, 1] - 1) * ranges.max_shear,
            ranges.min_scale + u[:, 2] * (ranges.max_scale - ranges.min_scale),
            ranges.min_scale + u[:, 3] * (ranges.max_scale - ranges.min_scale),
        ],
        dim=1,
    )


def warp_about_centre(images: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """Move each image's content by q = A (p - c) + c, c the image centre; bilinear, zero outside.
    images (N, C, S, S) float, matrices (N, 2, 2) -> (N, C, S, S). Uses A^-1 as grid_sample's output-to-input map
    (align_corners=True: normalised coordinates are pixel offsets from the centre divided by (S - 1) / 2)."""
    inverse = torch.linalg.inv(matrices.to(torch.float64)).to(images.dtype)  # (N, 2, 2)
    theta = torch.cat([inverse, torch.zeros(len(images), 2, 1, dtype=images.dtype)], dim=2).to(
        images.device
    )  # (N, 2, 3)
    grid = F.affine_grid(theta, list(images.shape), align_corners=True)  # (N, S, S, 2) source (x, y) per output pixel
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=True)


def _ink_extent(ink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ink (N, S) bool per row (or column) -> first and last inked index (N,) each; (0, S - 1) for a blank image."""
    size = ink.shape[1]
    first = torch.where(ink.any(dim=1), ink.float().argmax(dim=1), 0)
    last = torch.where(ink.any(dim=1), size - 1 - ink.flip(1).float().argmax(dim=1), size - 1)
    return first, last


def place_keeping_ink(images: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Translate each (N, C, S, S) image by an integer (dx, dy), uniform among the shifts that keep every non-zero
    pixel on the canvas (affNIST's placement rule). Returns the shifted images and the shifts (N, 2) as (dx, dy)."""
    n, _, size, _ = images.shape
    ink = images.detach().abs().amax(dim=1) > 0  # (N, S, S)
    shifts = []
    for axis_ink in (ink.any(dim=1), ink.any(dim=2)):  # columns (x), then rows (y): (N, S) each
        first, last = _ink_extent(axis_ink.cpu())
        low, high = -first, size - 1 - last  # (N,) each; low <= 0 <= high
        u = torch.rand(n, generator=generator)
        shifts.append(low + torch.floor(u * (high - low + 1).float()).long())
    shift = torch.stack(shifts, dim=1)  # (N, 2): dx, dy
    span = torch.arange(size)
    rows = (span.view(1, size) - shift[:, 1:2]) % size  # (N, S) source row of every output row
    cols = (span.view(1, size) - shift[:, 0:1]) % size  # (N, S) source column; wrapped pixels are blank by the rule
    index = (rows.view(n, size, 1) * size + cols.view(n, 1, size)).view(n, 1, size * size).to(images.device)
    moved = images.flatten(2).gather(2, index.expand(-1, images.shape[1], -1))
    return moved.view_as(images), shift


def random_affine_on_canvas(
    images: torch.Tensor, canvas: int, ranges: AugmentRanges, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training digits (N, C, h, h) in [0, 1] -> (N, C, canvas, canvas): centred on the canvas, warped by a random
    affine transform about its centre, then placed uniformly among the ink-preserving integer shifts.
    Returns the images and the per-image parameters (N, 6): rotation_deg, shear, scale_x, scale_y, shift_x, shift_y."""
    params = draw_transforms(len(images), ranges, generator)  # (N, 4)
    warped = warp_about_centre(centre_on_canvas(images, canvas), affine_matrices(*params.unbind(dim=1)))
    placed, shift = place_keeping_ink(warped, generator)
    return placed, torch.cat([params, shift.to(torch.float64)], dim=1)
